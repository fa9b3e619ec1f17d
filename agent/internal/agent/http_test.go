package agent

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/throttle-lab/throttle-lab/agent/internal/source"
)

// /windows on the fake tree and clock of agent_test.go: one streamed answer holding, for each
// key asked (or every key recorded), the same window /timeline serves for it.

func (l *loop) flush() {
	l.a.mu.Lock()
	defer l.a.mu.Unlock()
	for _, w := range l.a.watched {
		must(l.t, w.seg.Flush())
	}
}

func windowLines(t *testing.T, h http.Handler, query string) ([]WindowLine, *httptest.ResponseRecorder) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/windows"+query, nil))
	var out []WindowLine
	sc := bufio.NewScanner(rec.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	for sc.Scan() {
		var line WindowLine
		must(t, json.Unmarshal(sc.Bytes(), &line))
		out = append(out, line)
	}
	return out, rec
}

func timelineCSV(t *testing.T, h http.Handler, query string) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/timeline"+query, nil))
	if rec.Code != 200 {
		t.Fatalf("/timeline%s: %d %s", query, rec.Code, rec.Body.String())
	}
	body, _ := io.ReadAll(rec.Body)
	return string(body)
}

func shopLoop(t *testing.T) (*loop, http.Handler) {
	l := newLoop(t, Config{IdleInterval: 100 * time.Millisecond, Hold: 50 * time.Millisecond}, 1<<30)
	web1, web2 := l.group("web-1", 20000), l.group("web-2", 20000)
	l.watch(source.Want{Key: "shop/web-1", Namespace: "shop", Pod: "web-1", Spec: web1},
		source.Want{Key: "shop/web-2", Namespace: "shop", Pod: "web-2", Spec: web2})
	l.run(3)
	l.stat(web1, 30000, 3, 1, 5000)
	l.run(12)
	l.flush()
	return l, l.a.Handler(prometheus.NewRegistry())
}

func TestWindowsStreamsTheWindowOfEachKeyAskedAsTimelineServesIt(t *testing.T) {
	_, h := shopLoop(t)
	lines, rec := windowLines(t, h, "?key=shop/web-2&key=shop/gone&key=shop/web-1&from=0")
	if ct := rec.Header().Get("Content-Type"); ct != "application/x-ndjson" || !rec.Flushed {
		t.Fatalf("a stream of JSON lines, flushed a line at a time: %q flushed %v", ct, rec.Flushed)
	}
	if len(lines) != 4 {
		t.Fatalf("a line a key and the last: %+v", lines)
	}
	for i, pod := range []string{"web-2", "", "web-1"} {
		line := lines[i]
		if pod == "" {
			if line.Key != "shop/gone" || line.Meta != nil || !strings.Contains(line.Error, "no timeline of shop/gone") {
				t.Fatalf("a key without a timeline says so in its line: %+v", line)
			}
			continue
		}
		want := timelineCSV(t, h, "?namespace=shop&pod="+pod+"&from=0")
		if line.Key != "shop/"+pod || line.CSV != want || line.Meta == nil || line.Meta.Agent.Key != "shop/"+pod {
			t.Fatalf("%s's line is its /timeline window: %+v", pod, line)
		}
		if n := int64(strings.Count(want, "\n") - 1); line.Meta.Samples == nil || *line.Meta.Samples != n {
			t.Fatalf("%s's metadata counts its rows (%d): %+v", pod, n, line.Meta.Samples)
		}
	}
	if last := lines[3]; !last.Done || last.Windows != 2 || last.Key != "" {
		t.Fatalf("the last line says the stream is whole and how many windows it held: %+v", last)
	}
}

func TestWindowsWithoutKeysSendsEveryKeyRecordedAndRefusesABadWindow(t *testing.T) {
	_, h := shopLoop(t)
	lines, _ := windowLines(t, h, "")
	if len(lines) != 3 || lines[0].Key != "shop/web-1" || lines[1].Key != "shop/web-2" || !lines[2].Done || lines[2].Windows != 2 {
		t.Fatalf("every key it records, sorted, then the last line: %+v", lines)
	}
	for _, q := range []string{"?from=soon", "?from=20&to=10"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/windows"+q, nil))
		if rec.Code != http.StatusBadRequest {
			t.Fatalf("/windows%s: %d, want 400", q, rec.Code)
		}
	}
}
