// bindonly: a ceiling client of docs/benchmarks-e2e.md. It does no scheduling at all: it lists the
// pods of one namespace, then POSTs a pods/binding for each (round-robin over the nodes) from C
// goroutines, over HTTP/2 (-conns multiplexed TLS connections; client-go and kube-scheduler use
// one) or HTTP/1.1 with keep-alive (-http1: one connection per goroutine). Go's standard library
// only: `go build` with Debian's golang-go.
//
//	bindonly -server URL -token TOKEN -namespace NS -nodes N -node-prefix bench-node- -concurrency C
//	         [-http1] [-conns K] [-warm=true] [-settle 0s]
//
// Everything that is not a bind happens before the first POST: the list, the request bodies, and
// (-warm, the default) the TLS connections themselves, opened with one GET /version each, so the
// window first bind .. last bind holds binds only (a scheduler pays its connection set-up inside
// its window: this client is meant to be faster than any scheduler can be). -settle waits after
// that before the first bind (the API server's own garbage from the list).
//
// Prints one JSON line: binds, errors, seconds (its own first POST to its last answer), and its own
// CPU time (user+system, whole process) in the bind phase.
package main

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func cpuSeconds() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

func main() {
	server := flag.String("server", "", "API server URL")
	token := flag.String("token", "", "bearer token")
	namespace := flag.String("namespace", "", "namespace of the pending pods")
	nodes := flag.Int("nodes", 100, "number of nodes")
	prefix := flag.String("node-prefix", "bench-node-", "node name prefix (followed by a 4-digit index)")
	concurrency := flag.Int("concurrency", 64, "binds in flight")
	http1 := flag.Bool("http1", false, "HTTP/1.1 with keep-alive (one connection per goroutine) instead of HTTP/2")
	conns := flag.Int("conns", 1, "HTTP/2 connections (goroutines spread over them); ignored with -http1")
	warm := flag.Bool("warm", true, "open every connection (GET /version) before the first bind")
	settle := flag.Duration("settle", 0, "wait this long after the list and the warm-up before the first bind")
	flag.Parse()

	// One transport per connection: with HTTP/2 Go opens one connection per transport and host, and
	// with HTTP/1.1 a transport of its own per goroutine keeps each on one keep-alive connection.
	nt := *conns
	if *http1 {
		nt = *concurrency
	}
	if nt < 1 {
		nt = 1
	}
	clients := make([]*http.Client, nt)
	for i := range clients {
		tr := &http.Transport{
			TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // the benchmark's self-signed server
			MaxIdleConnsPerHost: 1,
			ForceAttemptHTTP2:   !*http1,
			DisableCompression:  true,
		}
		if *http1 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		}
		clients[i] = &http.Client{Transport: tr, Timeout: 60 * time.Second}
	}
	auth := "Bearer " + *token
	do := func(client *http.Client, method, url string, body []byte) (int, []byte, error) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, url, rd)
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", auth)
		req.Header.Set("Accept", "application/json")
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		return resp.StatusCode, data, err
	}

	code, data, err := do(clients[0], "GET", *server+"/api/v1/namespaces/"+*namespace+"/pods", nil)
	if err != nil || code != 200 {
		fmt.Fprintf(os.Stderr, "list pods: %d %v %s\n", code, err, data)
		os.Exit(1)
	}
	var list struct {
		Items []struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		} `json:"items"`
	}
	if err := json.Unmarshal(data, &list); err != nil {
		fmt.Fprintf(os.Stderr, "decode pod list: %v\n", err)
		os.Exit(1)
	}
	names := make([]string, 0, len(list.Items))
	for _, it := range list.Items {
		names = append(names, it.Metadata.Name)
	}
	sort.Strings(names)
	urls := make([]string, len(names))
	bodies := make([][]byte, len(names))
	for k, name := range names {
		urls[k] = *server + "/api/v1/namespaces/" + *namespace + "/pods/" + name + "/binding"
		bodies[k] = []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Binding","metadata":{"name":%q,"namespace":%q},`+
			`"target":{"apiVersion":"v1","kind":"Node","name":"%s%04d"}}`, name, *namespace, *prefix, k%*nodes))
	}
	if *warm {
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func(c *http.Client) {
				defer wg.Done()
				if code, data, err := do(c, "GET", *server+"/version", nil); err != nil || code != 200 {
					fmt.Fprintf(os.Stderr, "warm-up: %d %v %s\n", code, err, data)
				}
			}(c)
		}
		wg.Wait()
	}
	time.Sleep(*settle)

	var next, errs int64 = -1, 0
	var wg sync.WaitGroup
	cpu0 := cpuSeconds()
	start := time.Now()
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func(client *http.Client) {
			defer wg.Done()
			for {
				k := atomic.AddInt64(&next, 1)
				if k >= int64(len(names)) {
					return
				}
				code, data, err := do(client, "POST", urls[k], bodies[k])
				if err != nil || code != 201 {
					if atomic.AddInt64(&errs, 1) <= 5 {
						fmt.Fprintf(os.Stderr, "bind %s: %d %v %s\n", names[k], code, err, data)
					}
				}
			}
		}(clients[w%nt])
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	out, _ := json.Marshal(map[string]any{"binds": len(names), "errors": errs, "seconds": elapsed,
		"cpu_seconds": cpuSeconds() - cpu0, "concurrency": *concurrency, "http1": *http1, "conns": nt,
		"warm": *warm, "settle_seconds": settle.Seconds()})
	fmt.Println(string(out))
	if errs > 0 {
		os.Exit(2)
	}
}
