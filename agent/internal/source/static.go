package source

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// Static reads a file of "NAME SPEC" lines (SPEC: a cgroup directory or pid:PID; # starts a
// comment), re-read when it changes, so targets can come and go while the agent runs. The
// name is the target's "pod" in metrics and its timeline's key.
type Static struct {
	Path  string
	Every time.Duration // how often the file is looked at
}

var staticName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$`)

// ParseStatic reads the file's text.
func ParseStatic(text string) ([]Want, error) {
	var out []Want
	seen := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 2 {
			return nil, fmt.Errorf("line %d: expected NAME SPEC (a cgroup directory or pid:PID), got %q", n, line)
		}
		if !staticName.MatchString(f[0]) {
			return nil, fmt.Errorf("line %d: name %q: letters, digits, '.', '_' and '-' only", n, f[0])
		}
		if seen[f[0]] {
			return nil, fmt.Errorf("line %d: name %q given twice", n, f[0])
		}
		seen[f[0]] = true
		out = append(out, Want{Key: f[0], Pod: f[0], Spec: f[1]})
	}
	return out, nil
}

// Run reads the file now and whenever its content changes. A file that cannot be read or
// parsed keeps the last good set (the error is returned once at start, logged later).
func (s Static) Run(ctx context.Context, update func([]Want)) error {
	every := s.Every
	if every <= 0 {
		every = time.Second
	}
	read := func() ([]Want, error) {
		raw, err := os.ReadFile(s.Path)
		if err != nil {
			return nil, err
		}
		return ParseStatic(string(raw))
	}
	last, err := read()
	if err != nil {
		return fmt.Errorf("%s: %w", s.Path, err)
	}
	update(last)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			wants, err := read()
			if err != nil {
				fmt.Fprintf(os.Stderr, "throttle-agent: %s: %v (keeping the last list)\n", s.Path, err)
				continue
			}
			if !reflect.DeepEqual(wants, last) {
				last = wants
				update(wants)
			}
		}
	}
}
