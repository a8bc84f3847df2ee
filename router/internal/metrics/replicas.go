package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/pools"
)

// replicaCollector reports per-replica gauges for whatever pools are
// current, so a reload that drops a replica also drops its series.
type replicaCollector struct {
	current  func() []*pools.Pool
	inflight *prometheus.Desc
	healthy  *prometheus.Desc
	queue    *prometheus.Desc
	ejects   *prometheus.Desc
	scrapeOK *prometheus.Desc
}

// NewReplicaCollector reports switchyard_replica_* for the pools current
// returns at each scrape.
func NewReplicaCollector(current func() []*pools.Pool) prometheus.Collector {
	l := []string{"pool", "replica"}
	return &replicaCollector{
		current:  current,
		inflight: prometheus.NewDesc("switchyard_replica_inflight", "Requests Switchyard has open on the replica.", l, nil),
		healthy:  prometheus.NewDesc("switchyard_replica_healthy", "1 when the replica is healthy and not ejected, else 0.", l, nil),
		queue:    prometheus.NewDesc("switchyard_replica_queue", "Requests waiting in the replica's vLLM queue at the last fresh scrape.", l, nil),
		ejects:   prometheus.NewDesc("switchyard_replica_ejections_total", "Passive ejections of the replica since it was configured.", l, nil),
		scrapeOK: prometheus.NewDesc("switchyard_replica_scrape_up", "1 when the last vLLM /metrics scrape of the replica succeeded (only for pools that scrape).", l, nil),
	}
}

func (c *replicaCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inflight
	ch <- c.healthy
	ch <- c.queue
	ch <- c.ejects
	ch <- c.scrapeOK
}

func (c *replicaCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.current() {
		// The pool's clock, not time.Now: ejections and scrapes are stamped
		// with it, and tests inject it.
		now := p.Now()
		staleness := p.Options().Staleness
		for _, r := range p.Replicas() {
			healthy := 0.0
			if r.Available(now) {
				healthy = 1
			}
			ch <- prometheus.MustNewConstMetric(c.inflight, prometheus.GaugeValue, float64(r.Inflight()), p.Name, r.Name)
			ch <- prometheus.MustNewConstMetric(c.healthy, prometheus.GaugeValue, healthy, p.Name, r.Name)
			ch <- prometheus.MustNewConstMetric(c.ejects, prometheus.CounterValue, float64(r.Ejections()), p.Name, r.Name)
			if r.Options().Scrape.Enabled {
				up := 0.0
				if l := r.CurrentLoad(); l != nil && l.Err == "" {
					up = 1
				}
				ch <- prometheus.MustNewConstMetric(c.scrapeOK, prometheus.GaugeValue, up, p.Name, r.Name)
				ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, r.Queue(now, staleness), p.Name, r.Name)
			}
		}
	}
}
