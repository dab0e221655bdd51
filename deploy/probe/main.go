// Command probe is the container healthcheck of the Leasehold images: the
// runtime image is distroless (no shell, no curl), so compose healthchecks
// run this instead. It GETs one URL and exits 0 on a 2xx answer, 1 on
// anything else, within --timeout.
//
//	probe [--timeout 2s] http://127.0.0.1:7401/readyz
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() {
	timeout := flag.Duration("timeout", 2*time.Second, "bound on the whole request")
	flag.Parse()
	if flag.NArg() != 1 {
		fmt.Fprintln(os.Stderr, "usage: probe [--timeout D] URL")
		os.Exit(2)
	}
	if err := probe(flag.Arg(0), *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(1)
	}
}

func probe(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, body)
	}
	return nil
}
