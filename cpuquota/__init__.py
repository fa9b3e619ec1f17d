"""What the client and the service both stand on, with the standard library only: a CPU limit
(:mod:`cpuquota.limit`), the kernel's quota accounting as a pure model
(:mod:`cpuquota.account`), and finding and reading cgroups v1/v2 (:mod:`cpuquota.cgroupfs`).

``client`` and ``service`` import this package and never each other."""
