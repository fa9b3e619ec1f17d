package agent

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"sort"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/throttle-lab/throttle-lab/agent/internal/timeline"
)

// Handler serves /metrics, /healthz, /timelines (the keys with a timeline) and
// /timeline?namespace=NS&pod=POD[&container=C]&from=S&to=S[&format=csv|json]: the window
// [from, to] (Unix seconds, both optional) of that group's timeline, as the .cgroup.csv
// (format=csv, the default) or its .json; rows reach the files every FlushEvery.
func (a *Agent) Handler(reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/timelines", func(w http.ResponseWriter, _ *http.Request) {
		keys := map[string]bool{}
		for _, m := range a.store.ReadMetas() {
			keys[m.Agent.Key] = true
		}
		list := make([]string, 0, len(keys))
		for k := range keys {
			list = append(list, k)
		}
		sort.Strings(list)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"timelines": list})
	})
	mux.HandleFunc("/timeline", a.serveTimeline)
	mux.HandleFunc("/windows", a.serveWindows)
	return mux
}

func (a *Agent) serveTimeline(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	pod := q.Get("pod")
	if pod == "" {
		http.Error(w, "give pod=NAME (and namespace=NS, container=NAME for a pod's container)", http.StatusBadRequest)
		return
	}
	from, err := timeline.ParseEpoch(q.Get("from"), 0)
	if err == nil {
		var to int64
		to, err = timeline.ParseEpoch(q.Get("to"), math.MaxInt64)
		if err == nil && to < from {
			http.Error(w, "to is before from", http.StatusBadRequest)
			return
		}
		if err == nil {
			a.serveWindow(w, Key(q.Get("namespace"), pod, q.Get("container")), from, to, q.Get("format"))
			return
		}
	}
	http.Error(w, err.Error(), http.StatusBadRequest)
}

func (a *Agent) serveWindow(w http.ResponseWriter, key string, from, to int64, format string) {
	body, meta, err := a.store.Window(key, from, to)
	var none timeline.ErrNoTimeline
	if errors.As(err, &none) {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	switch format {
	case "", "csv":
		w.Header().Set("Content-Type", "text/csv")
		w.Header().Set("X-Timeline-Name", meta.Name)
		w.Write(body)
	case "json":
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(meta)
	default:
		http.Error(w, "format is csv or json", http.StatusBadRequest)
	}
}

// WindowLine is one line of /windows: a key's window (its metadata and its .cgroup.csv), or
// why it has none (Error); the last line says Done and how many windows it sent.
type WindowLine struct {
	Key     string         `json:"key,omitempty"`
	Meta    *timeline.Meta `json:"meta,omitempty"`
	CSV     string         `json:"csv,omitempty"`
	Error   string         `json:"error,omitempty"`
	Done    bool           `json:"done,omitempty"`
	Windows int            `json:"windows,omitempty"`
}

// serveWindows answers /windows as newline-delimited JSON (application/x-ndjson), a line a
// key in the order asked (or sorted), each flushed as soon as it is read, so that a client
// begins with the first while the agent reads the next; the last line is {"done": true}: a
// stream without it was cut.
func (a *Agent) serveWindows(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	from, err := timeline.ParseEpoch(q.Get("from"), 0)
	var to int64
	if err == nil {
		to, err = timeline.ParseEpoch(q.Get("to"), math.MaxInt64)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if to < from {
		http.Error(w, "to is before from", http.StatusBadRequest)
		return
	}
	keys, metas := q["key"], a.store.ReadMetas()
	if len(keys) == 0 {
		seen := map[string]bool{}
		for _, m := range metas {
			if !seen[m.Agent.Key] {
				seen[m.Agent.Key] = true
				keys = append(keys, m.Agent.Key)
			}
		}
		sort.Strings(keys)
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	sent := 0
	for _, key := range keys {
		if r.Context().Err() != nil {
			return
		}
		line := WindowLine{Key: key}
		body, meta, err := a.store.WindowIn(metas, key, from, to)
		if err != nil {
			line.Error = err.Error()
		} else {
			line.Meta, line.CSV = &meta, string(body)
			sent++
		}
		if enc.Encode(line) != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	enc.Encode(WindowLine{Done: true, Windows: sent})
}
