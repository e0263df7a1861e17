// work.go: fixed Go work for the bench (`cargo xtask bench`): ROUNDS calls,
// each in pprof.Do with labels of its own round (a fresh label map every
// call, as a server labelling each request makes), of an arithmetic loop,
// so every sample of it carries a goroutine's labels. Built twice by the
// bench: as it is (its labels read) and with its .go.buildinfo section
// renamed, so sysprof does not take it for a Go program (no labels read):
// the two runs' BPF time per sample is the price of the labels. Prints
// elapsed_ms=N (the monotonic clock around the work), as the C workloads do.
package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"time"
)

//go:noinline
func leaf(n int) int {
	s := 0
	for i := 0; i < n; i++ {
		s += i * i
	}
	return s
}

func main() {
	rounds, _ := strconv.Atoi(os.Args[1])
	start := time.Now()
	total := 0
	for r := 0; r < rounds; r++ {
		round := strconv.Itoa(r % 64)
		pprof.Do(context.Background(), pprof.Labels("round", round, "kind", "bench"), func(context.Context) {
			total += leaf(200000)
		})
	}
	fmt.Printf("check=%d\n", total%7)
	fmt.Printf("elapsed_ms=%.3f\n", float64(time.Since(start).Microseconds())/1e3)
}
