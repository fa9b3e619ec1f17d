// A tiny Go net/http service that burns CPU: the "any service" of the tests in Go.
//
//	go build -o go-burner main.go && ./go-burner [port]
//
// Prints "port N" on its first line once it listens. GET /burn?ms=N busy-loops until its OS
// thread has used N ms of CPU (the goroutine is locked to its thread; a quota's pauses do not
// count), then answers "burned N ms"; GET /healthz answers "ok". One goroutine per
// connection, keep-alive, as net/http does.
package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"syscall"
)

const rusageThread = 1 // RUSAGE_THREAD

func threadCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(rusageThread, &ru); err != nil {
		panic(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

func burn(ms float64) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	end := threadCPU() + int64(ms*1e6)
	x := 0
	for threadCPU() < end {
		for i := 0; i < 2000; i++ {
			x += i
		}
	}
	_ = x
}

func main() {
	port := "0"
	if len(os.Args) > 1 {
		port = os.Args[1]
	}
	http.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	http.HandleFunc("/burn", func(w http.ResponseWriter, r *http.Request) {
		ms, err := strconv.ParseFloat(r.URL.Query().Get("ms"), 64)
		if err != nil || ms < 0 || ms > 10000 {
			http.Error(w, "ms must be a number in [0, 10000]", http.StatusUnprocessableEntity)
			return
		}
		burn(ms)
		fmt.Fprintf(w, "burned %g ms\n", ms)
	})
	listener, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("port %d\n", listener.Addr().(*net.TCPAddr).Port)
	os.Stdout.Sync()
	if err := http.Serve(listener, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
