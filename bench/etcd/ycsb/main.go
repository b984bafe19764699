// ycsb: the etcd baseline of `dfi bench kv-etcd` — the kv bench's workload (YCSB-B-like: gets with
// probability -reads, else puts of -value-bytes values, uniform keys) against an etcd cluster
// through the real Go client (go.etcd.io/etcd/client/v3), with linearizable reads (etcd's
// default; not WithSerializable).
//
//	ycsb -endpoints 127.0.0.1:2379,... -clients 4 -window 16 -keys 100000 -seconds 3
//
// -clients client connections, each with -window goroutines keeping one request outstanding: the
// same offered load as -window outstanding requests per DFI client thread. Keys are preloaded
// first. Prints one JSON line: requests, requests_per_second, p50_us, p95_us, p99_us, errors.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func key(k int) string { return fmt.Sprintf("k%010d", k) }

func main() {
	endpoints := flag.String("endpoints", "127.0.0.1:2379", "comma-separated client URLs of the members")
	clients := flag.Int("clients", 4, "client connections")
	window := flag.Int("window", 1, "outstanding requests per client")
	keys := flag.Int("keys", 100000, "keys the requests draw from")
	reads := flag.Float64("reads", 0.95, "share of gets")
	valueBytes := flag.Int("value-bytes", 64, "value size")
	seconds := flag.Float64("seconds", 3, "run length")
	preload := flag.Int("preload", 0, "keys written before the run (default: all keys, at most 100000)")
	flag.Parse()

	eps := strings.Split(*endpoints, ",")
	conns := make([]*clientv3.Client, *clients)
	for i := range conns {
		c, err := clientv3.New(clientv3.Config{Endpoints: eps, DialTimeout: 10 * time.Second})
		if err != nil {
			fmt.Fprintln(os.Stderr, "ycsb: connect:", err)
			os.Exit(1)
		}
		defer c.Close()
		conns[i] = c
	}
	value := strings.Repeat("v", *valueBytes)
	n := *preload
	if n == 0 {
		n = *keys
		if n > 100000 {
			n = 100000
		}
	}
	{
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		per := (n + 63) / 64
		for w := 0; w < 64; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				c := conns[w%len(conns)]
				for k := w * per; k < (w+1)*per && k < n; k++ {
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					_, err := c.Put(ctx, key(k), value)
					cancel()
					if err != nil {
						errs <- err
						return
					}
				}
			}(w)
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			fmt.Fprintln(os.Stderr, "ycsb: preload:", err)
			os.Exit(1)
		}
	}

	deadline := time.Now().Add(time.Duration(*seconds * float64(time.Second)))
	type result struct {
		lat    []time.Duration
		errors int
		secs   float64
	}
	results := make([]result, *clients**window)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			c := conns[i%len(conns)]
			rng := rand.New(rand.NewSource(int64(i) + 1))
			r := &results[i]
			r.lat = make([]time.Duration, 0, 1<<16)
			start := time.Now()
			for time.Now().Before(deadline) {
				k := key(rng.Intn(*keys))
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				t0 := time.Now()
				var err error
				if rng.Float64() < *reads {
					_, err = c.Get(ctx, k)
				} else {
					_, err = c.Put(ctx, k, value)
				}
				cancel()
				if err != nil {
					r.errors++
					continue
				}
				r.lat = append(r.lat, time.Since(t0))
			}
			r.secs = time.Since(start).Seconds()
		}(i)
	}
	wg.Wait()

	var all []time.Duration
	errors := 0
	rate := 0.0
	for _, r := range results {
		all = append(all, r.lat...)
		errors += r.errors
		if r.secs > 0 {
			rate += float64(len(r.lat)) / r.secs
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	pct := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		i := int(p / 100 * float64(len(all)-1))
		return float64(all[i].Nanoseconds()) / 1000
	}
	out, _ := json.Marshal(map[string]interface{}{
		"requests": len(all), "requests_per_second": rate, "errors": errors,
		"p50_us": pct(50), "p95_us": pct(95), "p99_us": pct(99),
	})
	fmt.Println(string(out))
	if errors > 0 {
		os.Exit(1)
	}
}
