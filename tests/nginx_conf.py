"""The real nginx in tests: a configuration of its own in a temporary directory (no master
process, no daemon, every path under that directory), around the ``http`` block's own lines."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["nginx_binary", "nginx_conf"]

_CONF = """
daemon off;
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 64; }}
http {{
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
{http}
}}
"""


def nginx_binary() -> str | None:
    """Debian's nginx (in /usr/sbin, often not on a user's PATH), else the one on PATH."""
    return "/usr/sbin/nginx" if os.path.exists("/usr/sbin/nginx") else shutil.which("nginx")


def nginx_conf(directory: Path, http: str) -> Path:
    """Write ``directory/nginx.conf``: ``http`` inside the ``http`` block, after the temp
    paths; everything nginx writes stays in ``directory``. Returns the file."""
    path = directory / "nginx.conf"
    path.write_text(_CONF.format(dir=directory, http=http))
    return path
