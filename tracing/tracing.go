// Package tracing is ortserve's OpenTelemetry tracing: the SDK's tracer provider with an
// OTLP exporter (gRPC or HTTP), set up from serve's config and the standard OTEL_* variables;
// the W3C trace-context propagator that reads a request's traceparent; an observer that
// traces each batch a version runs; and a log handler that puts trace ids in log lines.
//
// Tracing is off unless an endpoint is given. Off, New builds nothing: the server and the
// runtime are handed no tracer, take no span from a context, and cost a request nothing.
package tracing

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// Instrumentation is the name of ortserve's tracers (the instrumentation scope).
const Instrumentation = "github.com/ortserve/ortserve"

// The OTLP protocols an exporter speaks, as OTEL_EXPORTER_OTLP_PROTOCOL spells them.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Config is what serve's flags say of tracing.
type Config struct {
	// Endpoint is the OTLP collector's URL: grpc://host:4317 (gRPC, plain text),
	// http://host:4318 or https://host:4318 (the protocol Protocol says). "": the standard
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT if set, else
	// tracing is off.
	Endpoint string
	// Protocol is ProtocolGRPC or ProtocolHTTP. "": grpc for a grpc:// endpoint, else the
	// standard OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or OTEL_EXPORTER_OTLP_PROTOCOL if set,
	// else gRPC, as TEI's --otlp-endpoint speaks.
	Protocol string
}

// Validate says what is wrong with c, in the words of serve's flags.
func (c Config) Validate() error {
	if c.Protocol != "" && c.Protocol != ProtocolGRPC && c.Protocol != ProtocolHTTP {
		return fmt.Errorf("--otlp-protocol %q: give %s or %s", c.Protocol, ProtocolGRPC, ProtocolHTTP)
	}
	if c.Endpoint == "" {
		return nil
	}
	u, err := url.Parse(c.Endpoint)
	if err != nil || u.Host == "" || (u.Scheme != "grpc" && u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("--otlp-endpoint %q: give a URL such as grpc://localhost:4317 or http://localhost:4318", c.Endpoint)
	}
	if u.Scheme == "grpc" && c.Protocol == ProtocolHTTP {
		return fmt.Errorf("--otlp-endpoint %q is gRPC but --otlp-protocol is %s: give an http:// endpoint, or leave --otlp-protocol out", c.Endpoint, ProtocolHTTP)
	}
	return nil
}

// Tracing is the SDK's tracer provider and the propagator of serve's traces.
type Tracing struct {
	provider *sdktrace.TracerProvider
	prop     propagation.TextMapPropagator
}

// New sets tracing up as c and the environment (getenv, os.Getenv in serve) say, or returns
// nil when it is off: no endpoint, OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none.
// version is ortserve's, for the resource's service.version. The SDK reads the other
// standard variables itself: OTEL_SERVICE_NAME (ortserve when unset) and
// OTEL_RESOURCE_ATTRIBUTES; OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG (the SDK's
// default, parentbased_always_on, when unset); OTEL_EXPORTER_OTLP_HEADERS, _TIMEOUT,
// _COMPRESSION and the TLS files; OTEL_BSP_* for the batch span processor.
func New(ctx context.Context, c Config, version string, getenv func(string) string) (*Tracing, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") || getenv("OTEL_TRACES_EXPORTER") == "none" {
		return nil, nil
	}
	if c.Endpoint == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return nil, nil
	}
	exp, err := exporter(ctx, c, getenv)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	// Later options win: the environment's service name over ortserve's default.
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("ortserve"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	return &Tracing{
		provider: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res)),
		prop:     propagation.TraceContext{},
	}, nil
}

// protocol is the protocol c's exporter speaks.
func protocol(c Config, getenv func(string) string) string {
	switch {
	case strings.HasPrefix(c.Endpoint, "grpc://"):
		return ProtocolGRPC
	case c.Protocol != "":
		return c.Protocol
	case getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") != "":
		return getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	case getenv("OTEL_EXPORTER_OTLP_PROTOCOL") != "":
		return getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	return ProtocolGRPC
}

// exporter is the OTLP exporter c asks for. Without an endpoint, the SDK's exporters read
// the OTEL_EXPORTER_OTLP_* variables themselves. Neither connects before its first export,
// so that a collector down at start delays nothing.
func exporter(ctx context.Context, c Config, getenv func(string) string) (*otlptrace.Exporter, error) {
	switch p := protocol(c, getenv); p {
	case ProtocolGRPC:
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			// grpc:// is plain-text gRPC, as http:// is to the exporter.
			opts = append(opts, otlptracegrpc.WithEndpointURL(strings.Replace(c.Endpoint, "grpc://", "http://", 1)))
		}
		return otlptracegrpc.New(ctx, opts...)
	case ProtocolHTTP:
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
		}
		return otlptracehttp.New(ctx, opts...)
	default:
		return nil, fmt.Errorf("protocol %q: set OTEL_EXPORTER_OTLP_PROTOCOL to %s or %s", p, ProtocolGRPC, ProtocolHTTP)
	}
}

// TracerProvider is the SDK's provider, for what instruments beside the HTTP server (a gRPC
// server's stats handler, otelgrpc.WithTracerProvider).
func (t *Tracing) TracerProvider() trace.TracerProvider { return t.provider }

// Tracer is ortserve's tracer.
func (t *Tracing) Tracer() trace.Tracer { return t.provider.Tracer(Instrumentation) }

// Propagator is the W3C trace-context propagator (traceparent, tracestate) that reads a
// caller's trace from HTTP headers or gRPC metadata.
func (t *Tracing) Propagator() propagation.TextMapPropagator { return t.prop }

// Shutdown exports the spans still buffered and stops the exporter, within ctx.
func (t *Tracing) Shutdown(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := t.provider.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: flushing spans to the collector: %w", err)
	}
	return nil
}
