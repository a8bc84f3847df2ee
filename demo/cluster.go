package demo

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/switchyard/switchyard/policy"
	"github.com/switchyard/switchyard/vllmsim"
)

// Cluster is a set of simulated replicas listening on loopback, one per
// replica of a config.
type Cluster struct {
	// Replicas maps "pool/replica" to its simulator.
	Replicas map[string]*vllmsim.Server
	servers  []*http.Server
	byName   map[string]*http.Server // "pool/replica" and bare replica names
}

// Kill stops the replica called name ("pool/replica" or the replica's own
// name) the way a crash would: its listener and every connection close at
// once, cutting the streams it was serving. It reports whether the replica
// existed.
func (c *Cluster) Kill(name string) bool {
	srv := c.byName[name]
	if srv == nil {
		return false
	}
	srv.Close()
	return true
}

// ProfileFor picks the simulated model for a pool; nil means ProfileByModel.
type ProfileFor func(pool *policy.Pool) vllmsim.Profile

// ProfileByModel times a pool like the reference cluster's models: Qwen on
// two nodes for a model whose name mentions qwen, MiniCPM otherwise.
func ProfileByModel(pool *policy.Pool) vllmsim.Profile {
	var p vllmsim.Profile
	if strings.Contains(strings.ToLower(pool.Model), "qwen") {
		p = vllmsim.QwenFlashNext2Node()
	} else {
		p = vllmsim.MiniCPM5_2B()
	}
	p.Model = pool.Model
	return p
}

// StartCluster starts a simulator for every replica of cfg on 127.0.0.1 and
// points cfg's replica URLs at them. speedUp divides every simulated
// duration (1 = real time).
func StartCluster(cfg *policy.Config, profile ProfileFor, speedUp float64, opts ...vllmsim.Option) (*Cluster, error) {
	if profile == nil {
		profile = ProfileByModel
	}
	c := &Cluster{Replicas: map[string]*vllmsim.Server{}, byName: map[string]*http.Server{}}
	for _, pool := range cfg.Pools {
		for _, r := range pool.Replicas {
			p := profile(pool)
			p.SpeedUp = speedUp
			sim := vllmsim.New(p, opts...)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("start simulator for %s/%s: %w", pool.Name, r.Name, err)
			}
			srv := &http.Server{Handler: sim, ReadHeaderTimeout: 10 * time.Second}
			go func() {
				if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
					_ = err // the listener was closed by Close
				}
			}()
			c.servers = append(c.servers, srv)
			c.Replicas[pool.Name+"/"+r.Name] = sim
			c.byName[pool.Name+"/"+r.Name], c.byName[r.Name] = srv, srv
			r.URL = "http://" + ln.Addr().String()
			r.Parsed, _ = url.Parse(r.URL)
		}
	}
	return c, nil
}

// Close stops every simulator.
func (c *Cluster) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, s := range c.servers {
		if err := s.Shutdown(ctx); err != nil {
			s.Close()
		}
	}
}
