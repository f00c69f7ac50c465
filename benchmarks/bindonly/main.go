// bindonly: the ceiling of docs/benchmarks-e2e.md. It does no scheduling at all: it lists the pods of
// one namespace, then POSTs a pods/binding for each (round-robin over the nodes) from C goroutines,
// over HTTP/2 (one multiplexed TLS connection, as client-go and kube-scheduler use) or HTTP/1.1 with
// keep-alive (C connections). Go's standard library only: `go build` with Debian's golang-go.
//
//	bindonly -server URL -token TOKEN -namespace NS -nodes N -node-prefix bench-node- -concurrency C [-http1]
//
// Prints one JSON line: binds, errors, seconds (its own first POST to its last answer).
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
	"time"
)

func main() {
	server := flag.String("server", "", "API server URL")
	token := flag.String("token", "", "bearer token")
	namespace := flag.String("namespace", "", "namespace of the pending pods")
	nodes := flag.Int("nodes", 100, "number of nodes")
	prefix := flag.String("node-prefix", "bench-node-", "node name prefix (followed by a 4-digit index)")
	concurrency := flag.Int("concurrency", 64, "binds in flight")
	http1 := flag.Bool("http1", false, "HTTP/1.1 with keep-alive (one connection per worker) instead of HTTP/2")
	flag.Parse()

	tr := &http.Transport{
		TLSClientConfig:     &tls.Config{InsecureSkipVerify: true}, // the benchmark's self-signed server
		MaxIdleConnsPerHost: *concurrency,
		MaxConnsPerHost:     0,
		ForceAttemptHTTP2:   !*http1,
	}
	if *http1 {
		tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	client := &http.Client{Transport: tr, Timeout: 60 * time.Second}
	do := func(method, path string, body []byte) (int, []byte, error) {
		req, err := http.NewRequest(method, *server+path, bytes.NewReader(body))
		if err != nil {
			return 0, nil, err
		}
		req.Header.Set("Authorization", "Bearer "+*token)
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

	code, data, err := do("GET", "/api/v1/namespaces/"+*namespace+"/pods", nil)
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

	var next, errs int64 = -1, 0
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				k := atomic.AddInt64(&next, 1)
				if k >= int64(len(names)) {
					return
				}
				name := names[k]
				body := fmt.Sprintf(`{"apiVersion":"v1","kind":"Binding","metadata":{"name":%q,"namespace":%q},`+
					`"target":{"apiVersion":"v1","kind":"Node","name":"%s%04d"}}`, name, *namespace, *prefix, int(k)%*nodes)
				code, data, err := do("POST", "/api/v1/namespaces/"+*namespace+"/pods/"+name+"/binding", []byte(body))
				if err != nil || code != 201 {
					if atomic.AddInt64(&errs, 1) <= 5 {
						fmt.Fprintf(os.Stderr, "bind %s: %d %v %s\n", name, code, err, data)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	out, _ := json.Marshal(map[string]any{"binds": len(names), "errors": errs, "seconds": elapsed,
		"concurrency": *concurrency, "http1": *http1})
	fmt.Println(string(out))
	if errs > 0 {
		os.Exit(2)
	}
}
