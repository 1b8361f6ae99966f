package nspawn

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/perimeter-ingress/perimeter/internal/testenv"
)

// load sends requests for host to url until stopped, half of the workers on
// keep-alive connections (which a reload must hand over or close between
// requests) and half opening a new connection per request (which meet a
// listening socket that must never be missing), and counts every request
// that did not get the pod's 200.
type load struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	cancel     context.CancelFunc
	wg         sync.WaitGroup
}

func startLoad(url, host, want string) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{cancel: cancel}
	clients := []*http.Client{
		{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 4}},
		{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}},
	}
	for w := 0; w < 4; w++ {
		cl := clients[w%2]
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				if err := l.one(ctx, cl, url, host, want); err != nil {
					if ctx.Err() != nil {
						return // stopping, not failing
					}
					l.failed.Add(1)
					l.mu.Lock()
					if len(l.errs) < 10 {
						l.errs = append(l.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
					}
					l.mu.Unlock()
				} else {
					l.ok.Add(1)
				}
			}
		}()
	}
	return l
}

func (l *load) one(ctx context.Context, cl *http.Client, url, host, want string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Host = host
	resp, err := cl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || string(body) != want {
		return fmt.Errorf("status %d body %.60q", resp.StatusCode, body)
	}
	return nil
}

// wait waits until at least n more requests have succeeded (or failed), so
// a phase under load is measured over real traffic, not an idle gap.
func (l *load) wait(n int64, timeout time.Duration) error {
	start := l.ok.Load() + l.failed.Load()
	return testenv.Poll(context.Background(), timeout, func() error {
		if done := l.ok.Load() + l.failed.Load() - start; done < n {
			return fmt.Errorf("load: %d of %d requests", done, n)
		}
		return nil
	})
}

// stop ends the load and returns the counts and the first errors.
func (l *load) stop() (ok, failed int64, errs []string) {
	l.cancel()
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok.Load(), l.failed.Load(), append([]string(nil), l.errs...)
}
