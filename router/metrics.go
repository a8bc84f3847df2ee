package router

import "github.com/prometheus/client_golang/prometheus"

// controlCollector reports the share controller's state, when the running
// config has one.
type controlCollector struct {
	g                        *Gateway
	target, share, threshold *prometheus.Desc
}

func newControlCollector(g *Gateway) *controlCollector {
	return &controlCollector{g: g,
		target:    prometheus.NewDesc("switchyard_control_target", "The share of policy-routed requests the controller holds its pool at (moving in capacity mode).", []string{"pool"}, nil),
		share:     prometheus.NewDesc("switchyard_control_share", "The pool's measured share of policy-routed requests over the controller's window.", []string{"pool"}, nil),
		threshold: prometheus.NewDesc("switchyard_control_threshold", "The score threshold the controller sets for the routes' auto bounds.", []string{"pool"}, nil),
	}
}

func (c *controlCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.target
	ch <- c.share
	ch <- c.threshold
}

func (c *controlCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.g.snap.Load()
	if s == nil || s.Policy == nil || s.Policy.Controller() == nil {
		return
	}
	ctrl := s.Policy.Controller()
	ch <- prometheus.MustNewConstMetric(c.target, prometheus.GaugeValue, ctrl.Target(), ctrl.Pool())
	ch <- prometheus.MustNewConstMetric(c.share, prometheus.GaugeValue, ctrl.Share(), ctrl.Pool())
	ch <- prometheus.MustNewConstMetric(c.threshold, prometheus.GaugeValue, ctrl.Threshold(), ctrl.Pool())
}
