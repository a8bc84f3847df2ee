package pools

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Collector exports per-replica gauges for whatever pools are current, so a
// reload that drops a replica also drops its series.
type Collector struct {
	current  func() []*Pool
	inflight *prometheus.Desc
	healthy  *prometheus.Desc
	queue    *prometheus.Desc
	ejects   *prometheus.Desc
	scrapeOK *prometheus.Desc
}

var _ prometheus.Collector = (*Collector)(nil)

// NewCollector returns a collector over the pools current returns at each
// scrape. Register it on the registry of your choice.
func NewCollector(current func() []*Pool) *Collector {
	l := []string{"pool", "replica"}
	return &Collector{
		current:  current,
		inflight: prometheus.NewDesc("switchyard_replica_inflight", "Requests Switchyard has open on the replica.", l, nil),
		healthy:  prometheus.NewDesc("switchyard_replica_healthy", "1 when the replica is healthy and not ejected, else 0.", l, nil),
		queue:    prometheus.NewDesc("switchyard_replica_queue", "Requests waiting in the replica's vLLM queue at the last fresh scrape.", l, nil),
		ejects:   prometheus.NewDesc("switchyard_replica_ejections_total", "Passive ejections of the replica since it was configured.", l, nil),
		scrapeOK: prometheus.NewDesc("switchyard_replica_scrape_up", "1 when the last vLLM /metrics scrape of the replica succeeded (only for pools that scrape).", l, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.inflight
	ch <- c.healthy
	ch <- c.queue
	ch <- c.ejects
	ch <- c.scrapeOK
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.current() {
		// The pool's clock, not time.Now: ejections and scrapes are stamped
		// with it, and tests inject it.
		now := p.reg.now()
		for _, r := range p.replicas {
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
				ch <- prometheus.MustNewConstMetric(c.queue, prometheus.GaugeValue, r.Queue(now, p.opts.Staleness), p.Name, r.Name)
			}
		}
	}
}
