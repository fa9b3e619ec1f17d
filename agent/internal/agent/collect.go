package agent

import (
	"github.com/prometheus/client_golang/prometheus"
)

var groupLabels = []string{"namespace", "pod", "container", "level"}

func desc(name, help string, extra ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, append(append([]string{}, groupLabels...), extra...), nil)
}

var (
	descPeriods = desc("throttle_lab_cpu_cfs_periods_total",
		"Enforcement periods that elapsed for the group's own CFS quota (cpu.stat nr_periods, cumulative since the group was made).")
	descThrottledPeriods = desc("throttle_lab_cpu_cfs_throttled_periods_total",
		"Periods in which the group ran out of its own quota and was throttled (cpu.stat nr_throttled).")
	descThrottledSeconds = desc("throttle_lab_cpu_cfs_throttled_seconds_total",
		"Time the group's run queues spent throttled by its own quota (cpu.stat throttled_time / throttled_usec), summed over CPUs.")
	descWait = desc("throttle_lab_cpu_cfs_throttled_period_wait_seconds",
		"How long the group waited in each throttled period: consecutive cpu.stat samples, the throttled time of an interval shared among the periods throttled in it (since the agent began watching the group).")
	descCoarse = desc("throttle_lab_cpu_cfs_throttled_periods_coarse_total",
		"Throttled periods of the wait histogram observed between two readings more than one period apart (the group was read at the idle rate): their wait is the average over that interval's throttled periods, not each period's own.")
	descUsage = desc("throttle_lab_cpu_usage_seconds_total",
		"CPU time the group used (v2 cpu.stat usage_usec, v1 cpuacct.usage or its threads' schedstat).")
	descQuota = desc("throttle_lab_cpu_cfs_quota_seconds",
		"The group's own CFS quota per period (cpu.max / cpu.cfs_quota_us); absent when it has none.")
	descPeriod = desc("throttle_lab_cpu_cfs_period_seconds",
		"The group's own CFS period (cpu.max / cpu.cfs_period_us); absent when it has no quota.")
	descNoQuota = desc("throttle_lab_cpu_no_quota",
		"1: the group has no CFS quota on it or above (exclusive CPUs under the static CPU manager, no limits.cpu): no CPU quota: throttling cannot happen here, so its throttling counters are not exported.")
	descStart = desc("throttle_lab_cpu_counters_start_time_seconds",
		"Unix time since which the group's counters here count without a reset: when the agent began watching it (its wait histogram counts from then; the kernel's counters from the group's creation, earlier). A later value is a new run of the counters, as process_start_time_seconds is a process's.")
	descPressureSome = desc("throttle_lab_cpu_pressure_waiting_seconds_total",
		"PSI: time some of the group's tasks waited for a CPU (cpu.pressure some total; cgroup v2).")
	descPressureFull = desc("throttle_lab_cpu_pressure_stalled_seconds_total",
		"PSI: time all of the group's tasks waited for a CPU (cpu.pressure full total; cgroup v2, Linux >= 5.13).")
	descWatched = prometheus.NewDesc("throttle_lab_agent_timelines",
		"Timelines being written (one per watched pod, container or static group).", nil, nil)
	descUnresolved = prometheus.NewDesc("throttle_lab_agent_unresolved_targets",
		"Targets the source wants whose group the agent cannot read (yet).", nil, nil)
	descTicks = prometheus.NewDesc("throttle_lab_agent_ticks_total",
		"Sampling rounds done.", nil, nil)
	descLate = prometheus.NewDesc("throttle_lab_agent_late_ticks_total",
		"Sampling rounds that ended more than one interval late (ticks were skipped).", nil, nil)
	descRows = prometheus.NewDesc("throttle_lab_agent_rows_total",
		"Timeline rows written, by the rate the group was read at: fast (every --interval: it throttled or became busy within --hold) or idle (every --idle-interval).", []string{"rate"}, nil)
)

// Describe implements prometheus.Collector.
func (a *Agent) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPeriods, descThrottledPeriods, descThrottledSeconds,
		descWait, descUsage, descQuota, descPeriod, descNoQuota, descPressureSome, descPressureFull,
		descWatched, descUnresolved, descTicks, descLate, descRows, descCoarse, descStart} {
		ch <- d
	}
}

// Collect implements prometheus.Collector: the last reading of every exported group; a group
// no longer watched is not in the state, so its series end (bounded labels).
func (a *Agent) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, n := range a.nodes {
		if n.export == nil || n.err != nil {
			continue
		}
		l := []string{n.export.namespace, n.export.pod, n.export.container, n.export.level}
		counter := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
		}
		ch <- prometheus.MustNewConstMetric(descStart, prometheus.GaugeValue,
			float64(n.since.UnixNano())/1e9, l...)
		if n.noQuota {
			// no claim of throttling: the counters of a group nothing can throttle stand still
			ch <- prometheus.MustNewConstMetric(descNoQuota, prometheus.GaugeValue, 1, l...)
		} else if n.hasStat {
			counter(descPeriods, float64(n.st.Periods))
			counter(descThrottledPeriods, float64(n.st.Throttled))
			counter(descThrottledSeconds, float64(n.st.ThrottledNS)/1e9)
			ch <- prometheus.MustNewConstHistogram(descWait, n.waits.Count, n.waits.SumSeconds,
				n.waits.Cumulative(), l...)
			counter(descCoarse, float64(n.coarse))
		}
		if n.usageSrc != "" {
			counter(descUsage, float64(n.usageNS)/1e9)
		}
		if q := n.quota; q != nil {
			ch <- prometheus.MustNewConstMetric(descQuota, prometheus.GaugeValue, float64(q.QuotaUS)/1e6, l...)
			ch <- prometheus.MustNewConstMetric(descPeriod, prometheus.GaugeValue, float64(q.PeriodUS)/1e6, l...)
		}
		if n.pressure != nil && n.some >= 0 {
			counter(descPressureSome, float64(n.some)/1e9)
			if n.full >= 0 {
				counter(descPressureFull, float64(n.full)/1e9)
			}
		}
	}
	ch <- prometheus.MustNewConstMetric(descWatched, prometheus.GaugeValue, float64(len(a.watched)))
	ch <- prometheus.MustNewConstMetric(descUnresolved, prometheus.GaugeValue, float64(len(a.unresolved)))
	ch <- prometheus.MustNewConstMetric(descTicks, prometheus.CounterValue, float64(a.ticks))
	ch <- prometheus.MustNewConstMetric(descLate, prometheus.CounterValue, float64(a.late))
	for _, rate := range []string{"fast", "idle"} {
		ch <- prometheus.MustNewConstMetric(descRows, prometheus.CounterValue, float64(a.reads[rate]), rate)
	}
}
