// golabels: a Go program whose goroutines carry pprof labels, for the
// tests of Go's labels (tests/tests/go.rs). Its main goroutine alternates
// two labelled loops of known relative work (handler=alpha twice the
// work of handler=beta, user=u1) for the seconds given; a third goroutine,
// labelled role=sleeper, blocks its thread in nanosleep(2) 10 ms at a
// time and measures each sleep on its monotonic clock. Go's own CPU
// profiler samples the same run into the file given, at 1 kHz: the oracle.
//
// Usage: golabels SECONDS CPU_PROFILE_PATH
// Prints: pid=N, main_goid=N and sleeper_goid=N (the goroutines' ids, as
// Go's own tracebacks say them), sleep_ns=N (the sleeps' total as
// measured), sleeps=N (how many), done.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"
)

var sink int

// goid is the calling goroutine's id, from the header of its own
// traceback ("goroutine 18 [running]:").
func goid() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	buf = bytes.TrimPrefix(buf, []byte("goroutine "))
	return string(buf[:bytes.IndexByte(buf, ' ')])
}

//go:noinline
func spin(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i % 7
	}
	return s
}

func main() {
	secs, _ := strconv.ParseFloat(os.Args[1], 64)
	f, err := os.Create(os.Args[2])
	if err != nil {
		panic(err)
	}
	fmt.Printf("pid=%d\n", os.Getpid())
	fmt.Printf("main_goid=%s\n", goid())
	// 1 kHz rather than pprof's 100 Hz: 300 samples of a 3-s run would
	// leave each share ±2.7 points of noise (Go warns that the rate was set
	// before the profile; it is kept).
	runtime.SetCPUProfileRate(1000)
	if err := pprof.StartCPUProfile(f); err != nil {
		panic(err)
	}
	deadline := time.Now().Add(time.Duration(secs * float64(time.Second)))
	slept := make(chan time.Duration)
	go pprof.Do(context.Background(), pprof.Labels("role", "sleeper"), func(context.Context) {
		fmt.Printf("sleeper_goid=%s\n", goid())
		var total time.Duration
		n := 0
		for time.Now().Before(deadline) {
			n++
			start := time.Now()
			ts := syscall.Timespec{Nsec: 10_000_000}
			for syscall.Nanosleep(&ts, &ts) == syscall.EINTR {
			}
			total += time.Since(start)
		}
		fmt.Printf("sleeps=%d\n", n)
		slept <- total
	})
	for time.Now().Before(deadline) {
		pprof.Do(context.Background(), pprof.Labels("handler", "alpha"), func(context.Context) { sink += spin(4_000_000) })
		pprof.Do(context.Background(), pprof.Labels("handler", "beta", "user", "u1"), func(context.Context) { sink += spin(2_000_000) })
	}
	total := <-slept
	pprof.StopCPUProfile()
	f.Close()
	fmt.Printf("sleep_ns=%d\n", total.Nanoseconds())
	fmt.Println("done")
}
