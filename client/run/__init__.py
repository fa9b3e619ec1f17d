"""The run layer: send requests (load modes), record them (one ``record_run``), start and stop
what is measured (targets) and read what the kernel counted meanwhile. Imports only
``client.data`` (and ``service``'s shared records)."""
