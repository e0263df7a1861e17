// godeep: a goroutine `depth` calls deep (`down`, each a frame of its own)
// spinning in `leafspin` at the bottom for `secs` seconds: a stack deeper
// than the kernel's walk holds (1,024 frames), whose goroutine pair must
// not be written over its leaf. Usage: godeep SECS DEPTH; prints its pid.
package main

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"time"
)

var sink int

//go:noinline
func leafspin(deadline time.Time) int {
	s := 0
	for time.Now().Before(deadline) {
		for i := 0; i < 100000; i++ {
			s += i * i % 7
		}
	}
	return s
}

//go:noinline
func down(n int, deadline time.Time) int {
	if n == 0 {
		return leafspin(deadline)
	}
	return down(n-1, deadline) + 1
}

// The main goroutine stays on the main thread, which the test reads
// (locked in init, as Go documents for the main thread).
func init() {
	runtime.LockOSThread()
}

func main() {
	secs, _ := strconv.ParseFloat(os.Args[1], 64)
	depth, _ := strconv.Atoi(os.Args[2])
	fmt.Printf("pid=%d\n", os.Getpid())
	sink = down(depth, time.Now().Add(time.Duration(secs*float64(time.Second))))
	fmt.Println("done")
}
