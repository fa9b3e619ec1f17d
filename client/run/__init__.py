"""The run layer: send requests (load modes), record them (one ``record_run``), start and stop
what is measured (targets) around a run (one ``measure``) and read what the kernel counted
meanwhile. Imports only ``client.data`` (and ``cpuquota``)."""
