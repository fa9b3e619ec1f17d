package cgroupfs

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"unsafe"
)

// Stat is a cpu.stat's bandwidth counters, throttled time in ns (v1 throttled_time is ns,
// v2 throttled_usec µs), and v2's usage_usec in ns when present.
type Stat struct {
	Periods     int64
	Throttled   int64
	ThrottledNS int64
	UsageNS     int64
	HasUsage    bool
}

// ParseCPUStat reads "name value" lines without allocating; ok false without nr_periods and
// nr_throttled (a v2 group without the cpu controller).
func ParseCPUStat(b []byte, version int) (Stat, bool) {
	var s Stat
	var havePeriods, haveThrottled bool
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		name, value := line[:sp], atoi(line[sp+1:])
		switch string(name) { // no allocation: the compiler special-cases this conversion
		case "nr_periods":
			s.Periods, havePeriods = value, true
		case "nr_throttled":
			s.Throttled, haveThrottled = value, true
		case "throttled_time":
			if version == 1 {
				s.ThrottledNS = value
			}
		case "throttled_usec":
			if version == 2 {
				s.ThrottledNS = value * 1000
			}
		case "usage_usec":
			s.UsageNS, s.HasUsage = value*1000, true
		}
	}
	return s, havePeriods && haveThrottled
}

func atoi(b []byte) int64 {
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int64(c-'0')
	}
	return n
}

// ParsePressure: cpu.pressure's some and full totals (µs in the file) in ns; full -1 when the
// file has no full line.
func ParsePressure(b []byte) (some, full int64, ok bool) {
	full = -1
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		j := bytes.Index(line, []byte("total="))
		if j < 0 {
			continue
		}
		v := atoi(line[j+len("total="):]) * 1000
		if bytes.HasPrefix(line, []byte("some")) {
			some, ok = v, true
		} else if bytes.HasPrefix(line, []byte("full")) {
			full = v
		}
	}
	return some, full, ok
}

// File is a kernel file kept open and re-read from offset 0 with one pread (the kernel
// regenerates a cgroup or proc file read from offset 0).
type File struct {
	fd  int
	buf []byte
}

// OpenFile opens path read-only.
func OpenFile(path string, size int) (*File, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return &File{fd: fd, buf: make([]byte, size)}, nil
}

// Read returns the file's whole text (valid until the next Read).
//
// A raw pread: a cgroup or proc file is generated in memory and never blocks, and
// syscall.Pread's entersyscall wakes the Go runtime's sysmon thread from its sleep at the
// first system call of each tick, which then polls every 20 µs while the tick runs: on the
// 2-CPU VM, those wake-ups cost more than the reads themselves.
func (f *File) Read() ([]byte, error) {
	for {
		r, _, errno := syscall.RawSyscall6(syscall.SYS_PREAD64, uintptr(f.fd),
			uintptr(unsafe.Pointer(&f.buf[0])), uintptr(len(f.buf)), 0, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return nil, errno
		}
		n := int(r)
		if n == 0 {
			return nil, syscall.ENODEV // a removed group's file reads empty
		}
		return f.buf[:n], nil
	}
}

// Close the file.
func (f *File) Close() {
	if f != nil && f.fd >= 0 {
		syscall.Close(f.fd)
		f.fd = -1
	}
}

// SchedstatUsage: CPU used by the tasks of a v1 group and its descendants, from
// /proc/<tid>/schedstat (a group made in the cpu hierarchy only has no cpuacct.usage). A
// thread that leaves keeps its last value in the sum, so the total never goes down. Costly:
// the tasks files are re-read each time (a v1 pid list stays cached per open file).
type SchedstatUsage struct {
	dir     string
	proc    string
	threads map[int]int64
	goneNS  int64
	reads   int
	dirs    []string
}

// NewSchedstatUsage for the group directory dir.
func NewSchedstatUsage(dir, proc string) *SchedstatUsage {
	s := &SchedstatUsage{dir: dir, proc: proc, threads: map[int]int64{}}
	s.scan()
	return s
}

func (s *SchedstatUsage) scan() {
	s.dirs = s.dirs[:0]
	filepath.WalkDir(s.dir, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			s.dirs = append(s.dirs, path)
		}
		return nil
	})
}

// Read the summed ns on CPU.
func (s *SchedstatUsage) Read() (int64, error) {
	s.reads++
	if s.reads%100 == 0 {
		s.scan()
	}
	seen := map[int]bool{}
	var any bool
	for _, d := range s.dirs {
		raw, err := os.ReadFile(filepath.Join(d, "tasks"))
		if err != nil {
			continue
		}
		any = true
		for _, f := range bytes.Fields(raw) {
			tid, _ := strconv.Atoi(string(f))
			seen[tid] = true
		}
	}
	if !any {
		return 0, syscall.ENOENT
	}
	var total int64
	for tid := range seen {
		raw, err := os.ReadFile(filepath.Join(s.proc, strconv.Itoa(tid), "schedstat"))
		if err != nil {
			continue
		}
		s.threads[tid] = atoi(raw)
	}
	for tid, ns := range s.threads {
		if !seen[tid] {
			s.goneNS += ns
			delete(s.threads, tid)
			continue
		}
		total += ns
	}
	return total + s.goneNS, nil
}
