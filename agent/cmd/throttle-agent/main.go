// throttle-agent: one recorder per node. It samples the CFS quota counters of the groups its
// source names (the labelled pods of its node, or a static list) in one loop, writes their
// timelines in the format http-timing imports, and serves /metrics and /timeline.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/throttle-lab/throttle-lab/agent/internal/agent"
	"github.com/throttle-lab/throttle-lab/agent/internal/cgroupfs"
	"github.com/throttle-lab/throttle-lab/agent/internal/source"
	"github.com/throttle-lab/throttle-lab/agent/internal/timeline"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Version of the agent (the metadata's "version").
const Version = "0.1.0"

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "throttle-agent: %v\n", err)
		os.Exit(2)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// prepareTimelines makes dir (and its parents) and gives it to owner "UID:GID": the agent
// runs as that user without capabilities; this needs CAP_CHOWN only (its mode stays: a chmod
// of a directory root no longer owns would need CAP_FOWNER too).
func prepareTimelines(dir, owner string) error {
	var uid, gid int
	if n, err := fmt.Sscanf(owner, "%d:%d", &uid, &gid); err != nil || n != 2 || uid < 0 || gid < 0 {
		return fmt.Errorf("--prepare-timelines takes UID:GID (got %q)", owner)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "throttle-agent: %s belongs to %d:%d\n", dir, uid, gid)
	return nil
}

func run() error {
	fs := flag.NewFlagSet("throttle-agent", flag.ContinueOnError)
	listen := fs.String("listen", envOr("LISTEN", ":9742"), "address of /metrics and /timeline")
	src := fs.String("source", envOr("SOURCE", "kube"), "kube (this node's labelled pods) or static")
	targets := fs.String("targets", envOr("TARGETS", ""), "static: a file of 'NAME SPEC' lines (SPEC: a cgroup directory or pid:PID)")
	node := fs.String("node", envOr("NODE_NAME", ""), "kube: this node's name")
	selector := fs.String("selector", envOr("SELECTOR", "throttle-lab/record=true"), "kube: the pods' label selector")
	kubeconfig := fs.String("kubeconfig", envOr("KUBECONFIG", ""), "kube: a kubeconfig (default: the in-cluster service account)")
	dir := fs.String("timelines", envOr("TIMELINES", "/var/lib/throttle-lab/timelines"), "where the timelines go")
	interval := fs.Duration("interval", 10*time.Millisecond, "between two samples of a group that throttles or became busy (http-timing record's default)")
	idleInterval := fs.Duration("idle-interval", time.Second, "between two samples of a group that neither throttled nor became busy within --hold (0: every group every --interval)")
	hold := fs.Duration("hold", 5*time.Second, "how long a group stays at --interval after it throttled or became busy")
	maxSize := fs.Int64("max-size", 50_000_000, "bytes of one timeline file (a new one starts beyond)")
	maxTotal := fs.Int64("max-total", 2_000_000_000, "bytes of all timelines together (the oldest finished ones go)")
	maxAge := fs.Duration("max-age", 72*time.Hour, "a finished timeline older than this goes")
	proc := fs.String("proc", "/proc", "the proc file system")
	checkEvery := fs.Duration("check-every", time.Second, "how often the quota files are re-read (a resize starts a new timeline)")
	prepare := fs.String("prepare-timelines", "", "UID:GID: make the timelines directory that user's and exit (an init container's job: the kubelet creates a hostPath directory as root)")
	// One P: the loop and the HTTP server need no parallelism, and with more the runtime wakes
	// idle threads to look for work at every tick (context switches that cost more than the
	// sampling). GOMAXPROCS in the environment still wins.
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *prepare != "" {
		return prepareTimelines(*dir, *prepare)
	}
	if *interval <= 0 || *maxSize < 4096*2 || *idleInterval < 0 || *hold < 0 {
		return fmt.Errorf("--interval must be > 0, --idle-interval and --hold >= 0, --max-size at least 8192")
	}
	var source_ source.Source
	switch *src {
	case "static":
		if *targets == "" {
			return fmt.Errorf("--source static needs --targets FILE")
		}
		if _, err := os.Stat(*targets); err != nil {
			return err
		}
		source_ = source.Static{Path: *targets}
	case "kube":
		var cfg *rest.Config
		var err error
		if *kubeconfig != "" {
			cfg, err = clientcmd.BuildConfigFromFlags("", *kubeconfig)
		} else {
			cfg, err = rest.InClusterConfig()
		}
		if err != nil {
			return fmt.Errorf("no Kubernetes API: %w", err)
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		source_ = source.Kube{Client: client, Node: *node, Selector: *selector}
	default:
		return fmt.Errorf("--source is kube or static (got %q)", *src)
	}
	resolver, err := cgroupfs.NewResolver(*proc)
	if err != nil {
		return err
	}
	store, err := timeline.NewStore(*dir)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	store.MaxSize, store.MaxTotal, store.MaxAge = *maxSize, *maxTotal, *maxAge
	store.Host, store.Version, store.IntervalS, store.Command = host, Version, interval.Seconds(), os.Args
	store.Node, store.HostCPUs = *node, runtime.NumCPU()
	a := agent.New(agent.Config{Interval: *interval, IdleInterval: *idleInterval, Hold: *hold, FlushEvery: 500 * time.Millisecond,
		CheckEvery: *checkEvery, PruneEvery: time.Minute, Proc: *proc, Log: os.Stderr}, resolver, store)
	reg := prometheus.NewRegistry()
	reg.MustRegister(a, collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		collectors.NewGoCollector())

	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	server := &http.Server{Handler: a.Handler(reg), ReadHeaderTimeout: 10 * time.Second}
	go server.Serve(ln)
	fmt.Fprintf(os.Stderr, "throttle-agent: listening on %s, timelines in %s, every %s\n", ln.Addr(), *dir, *interval)

	srcErr := make(chan error, 1)
	go func() { srcErr <- source_.Run(ctx, a.Update) }()
	done := make(chan struct{})
	go func() { a.Run(ctx); close(done) }()
	select {
	case err = <-srcErr:
		if err != nil {
			cancel()
		}
	case <-ctx.Done():
	}
	<-done
	shut, stop := context.WithTimeout(context.Background(), 2*time.Second)
	defer stop()
	server.Shutdown(shut)
	return err
}
