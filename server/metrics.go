package server

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the server's Prometheus metrics, on a registry the caller owns.
type Metrics struct {
	provider *prometheus.GaugeVec
}

// NewMetrics registers the server's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		provider: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ortserve_execution_provider_info",
			Help: "Execution provider each model version runs on (value is always 1).",
		}, []string{"model", "version", "provider"}),
	}
	reg.MustRegister(m.provider)
	return m
}

// SetProviders records the provider of every version of every model.
func (m *Metrics) SetProviders(provider string, infos []ModelInfo) {
	for _, mi := range infos {
		for _, v := range mi.Versions {
			m.provider.WithLabelValues(mi.Name, v, provider).Set(1)
		}
	}
}
