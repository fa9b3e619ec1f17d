# Two commands for a fresh clone: `make demo` and `make test`. Both create the venv themselves.
# `make demo` installs what the demo runs: the client and the service (extra `service`), about
# 190 MB. `make test` (and `make venv`, docs, lint, bench, kube-*) adds the test tools on top
# (extra `test`, which includes the docs and k8s extras: a test builds the site), about 770 MB.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: demo test venv clean lint kube-node kube-down kube-status kube-images kube-demo kube-recorder

# The demo's venv: the client and the service. The venv is made without pip and gets a
# current pip from the Python's own (pip 22.3+ has --python); where that Python has no pip,
# ensurepip's. ensurepip took 7.4 s and its pip 23.2 resolved the demo's packages in 22 s, a
# current pip in 10.6 s (2026-12-01). Not byte-compiled ahead: the demo compiles what it imports
# on first import, a few seconds less than compiling all of it (2026-11-29). -qq: errors only
# (setuptools' "Editable installation" notice is not one).
PIP_QUIET := --quiet --disable-pip-version-check --no-compile
$(BIN)/.installed-demo: pyproject.toml
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python install $(PIP_QUIET) --upgrade pip 2>/dev/null \
	    || $(BIN)/python -m ensurepip --upgrade --default-pip > /dev/null
	$(BIN)/pip install $(PIP_QUIET) -q -e '.[service]'
	touch $@

# Everything else on top of the demo's: the test, docs and k8s extras.
# pip installs without byte-compiling and compileall compiles the venv on every CPU at once:
# 17 s instead of pip's 28 s one file after the other (2 CPUs, 2026-11-27). Not compiled ahead:
# packages the cgroup v2 guest never imports (it sees the venv read-only and would compile what
# it imports at TCG's speed in every process; the host compiles these on first import) and the
# packages' own tests: 10 s instead of 19 (2026-11-27)
NO_PRECOMPILE := /site-packages/(kubernetes|kubernetes_validate|playwright|material|babel|mkdocs[a-z_]*|locust|gevent|zope|hypothesis|fontTools|pip|setuptools|aiohttp|zmq|werkzeug|oauthlib)/|/site-packages/[^/]+/tests/
$(BIN)/.installed: $(BIN)/.installed-demo
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -e '.[service,test]'
	$(BIN)/python -m compileall -q -j 0 -x '$(NO_PRECOMPILE)' $(VENV)/lib > /dev/null
	touch $@

venv: $(BIN)/.installed

demo: $(BIN)/.installed-demo
	PATH="$(CURDIR)/$(BIN):$$PATH" bash scripts/demo.sh

# three plain pytest runs at once: -m guest, -m 'node or docker' and the host's others
test: $(BIN)/.installed
	PYTHON=$(BIN)/python bash scripts/test.sh $(PYTEST_ARGS)

# the documentation site (mkdocs.yml, docs/; README.md is its home page) into site/, after
# the reference pages' generated parts (options, HTTP API) are written from the code
.PHONY: docs reference
docs: reference
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict --site-dir site

reference: $(BIN)/.installed
	$(BIN)/python -m scripts.mkdocs_hooks

# The benchmarks (benchmarks/): each prints its table and keeps a dated JSON record in
# benchmarks/results/; docs/benchmarks.md's generated part shows the latest of each. The default
# set needs root and this host only; BENCH="kernel_quota parallel_burn" picks (--list: all).
.PHONY: bench
BENCH ?=
bench: $(BIN)/.installed
	$(BIN)/python -m benchmarks $(BENCH)

# ruff's pyflakes rules on everything, mypy on the packages (not part of `make test`)
lint: $(BIN)/.installed
	$(BIN)/pip install --quiet -e '.[lint]'
	$(BIN)/ruff check --select F cpuquota client service kubenode tests benchmarks scripts
	$(BIN)/mypy cpuquota client service kubenode

# A single-node Kubernetes cluster on this host, in namespaces of its own (needs root; kubenode/).
# kube-node builds or reuses the pinned Kubernetes in /var/cache/throttle-lab, brings the node up
# (or reuses it) and prints the two `export` lines a shell needs; kube-down removes all of it.
# NODES=2, the default (what the node tests use), joins a second node (its own namespaces,
# containerd, kubelet) to the first's control plane; NODES=1 brings up the first alone.
NODES ?= 2
kube-node: $(BIN)/.installed
	$(BIN)/python -m kubenode up --nodes $(NODES)

kube-down: $(BIN)/.installed
	$(BIN)/python -m kubenode down

kube-status: $(BIN)/.installed
	$(BIN)/python -m kubenode status

# The project's two images (docker/Dockerfile) built and imported into the running node.
kube-images: $(BIN)/.installed
	$(BIN)/python -m kubenode images

# The node recorder (k8s/recorder/: the Go agent as a DaemonSet) on the running node, its image
# built from agent/Dockerfile and imported under a tag of its own (kubenode/recorder.py).
kube-recorder: $(BIN)/.installed
	$(BIN)/python -m kubenode recorder

# The node up, the images in, `kubectl apply -k k8s/`, the Job's two reports printed, its raw data
# drawn into pictures/k8s-*.png. Leaves the node running (make kube-down stops it).
kube-demo: $(BIN)/.installed-demo
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m kubenode.demo

# the node agent (agent/, Go; k8s/recorder/): a static binary at agent/throttle-agent
GO ?= $(shell command -v go || echo /usr/local/go/bin/go)
.PHONY: agent
agent:
	cd agent && CGO_ENABLED=0 nice -n 10 $(GO) build -trimpath -ldflags='-s -w' -o throttle-agent ./cmd/throttle-agent

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
