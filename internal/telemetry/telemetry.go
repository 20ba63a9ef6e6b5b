// Package telemetry sets up OpenTelemetry tracing for the sluice binary from
// the standard OTEL_* environment variables and the config file.
package telemetry

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// TracesConfig is the `observability.traces` section of the config. Each
// field falls back to the standard environment variable, then the default.
type TracesConfig struct {
	// Exporter is "otlp" or "none". Default: OTEL_TRACES_EXPORTER; else
	// "otlp" when an OTLP endpoint is set in the environment, else "none".
	Exporter string `yaml:"exporter"`
	// Protocol is "http/protobuf" or "grpc". Default:
	// OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, OTEL_EXPORTER_OTLP_PROTOCOL, else
	// "http/protobuf".
	Protocol string `yaml:"protocol"`
	// Endpoint is the collector's URL, e.g. "http://collector:4318"
	// (http/protobuf appends /v1/traces). It overrides
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT and OTEL_EXPORTER_OTLP_ENDPOINT,
	// which the OpenTelemetry SDK reads when it is empty.
	Endpoint string `yaml:"endpoint"`
	// SampleRatio is the share of root traces sampled, with the
	// parentbased_traceidratio sampler: a batch carrying a record whose
	// producer traceparent is sampled is a child of that producer span and
	// so is sampled. It applies only when OTEL_TRACES_SAMPLER is unset: a
	// set OTEL_TRACES_SAMPLER wins, with OTEL_TRACES_SAMPLER_ARG as the
	// SDK reads them. Default: OTEL_TRACES_SAMPLER_ARG, else 0.01.
	SampleRatio *float64 `yaml:"sample_ratio"`
	// ServiceName defaults to OTEL_SERVICE_NAME, else "sluice".
	ServiceName string `yaml:"service_name"`
}

// Validate resolves defaults from the environment and checks the values.
func (c *TracesConfig) Validate(getenv func(string) string) error {
	if c.Exporter == "" {
		c.Exporter = getenv("OTEL_TRACES_EXPORTER")
	}
	if c.Exporter == "" {
		c.Exporter = "none"
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || c.Endpoint != "" {
			c.Exporter = "otlp"
		}
	}
	switch c.Exporter {
	case "otlp", "none":
	default:
		return fmt.Errorf("observability.traces.exporter: %q is not otlp or none", c.Exporter)
	}
	for _, v := range []string{c.Protocol, getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"), getenv("OTEL_EXPORTER_OTLP_PROTOCOL"), "http/protobuf"} {
		if v != "" {
			c.Protocol = v
			break
		}
	}
	switch c.Protocol {
	case "http/protobuf", "grpc":
	default:
		return fmt.Errorf("observability.traces.protocol: %q is not http/protobuf or grpc", c.Protocol)
	}
	if err := checkSamplerEnv(getenv); err != nil {
		return err
	}
	if c.SampleRatio == nil {
		r := 0.01
		if v := getenv("OTEL_TRACES_SAMPLER_ARG"); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %w", err)
			}
			r = f
		}
		c.SampleRatio = &r
	}
	if *c.SampleRatio < 0 || *c.SampleRatio > 1 || *c.SampleRatio != *c.SampleRatio {
		return fmt.Errorf("observability.traces.sample_ratio: %v is not between 0 and 1", *c.SampleRatio)
	}
	if c.ServiceName == "" {
		c.ServiceName = getenv("OTEL_SERVICE_NAME")
	}
	if c.ServiceName == "" {
		c.ServiceName = "sluice"
	}
	return nil
}

// samplersFromEnv are the OTEL_TRACES_SAMPLER values the SDK builds itself,
// and whether they take OTEL_TRACES_SAMPLER_ARG as a ratio.
var samplersFromEnv = map[string]bool{
	"always_on": false, "always_off": false, "traceidratio": true,
	"parentbased_always_on": false, "parentbased_always_off": false, "parentbased_traceidratio": true,
}

// checkSamplerEnv rejects an OTEL_TRACES_SAMPLER the SDK does not know, or a
// ratio it would replace with 1, where the SDK only logs and goes on.
func checkSamplerEnv(getenv func(string) string) error {
	name := strings.ToLower(strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER")))
	if name == "" {
		return nil
	}
	ratio, ok := samplersFromEnv[name]
	if !ok {
		return fmt.Errorf("OTEL_TRACES_SAMPLER: %q is not one of always_on, always_off, traceidratio, parentbased_always_on, parentbased_always_off, parentbased_traceidratio", name)
	}
	if arg := strings.TrimSpace(getenv("OTEL_TRACES_SAMPLER_ARG")); ratio && arg != "" {
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			return fmt.Errorf("OTEL_TRACES_SAMPLER_ARG: %q is not a ratio between 0 and 1", arg)
		}
	}
	return nil
}

// FlushLinkLimit is the most links a span gets by default: the bound on a
// flush span's links to consume spans.
const FlushLinkLimit = 1024

// Setup builds the tracer provider the config asks for and installs it and
// the W3C propagator globally. The returned shutdown flushes spans.
func Setup(ctx context.Context, c TracesConfig, version string) (trace.TracerProvider, func(context.Context) error, error) {
	if err := c.Validate(os.Getenv); err != nil {
		return nil, nil, err
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if c.Exporter == "none" {
		tp := noop.NewTracerProvider()
		return tp, func(context.Context) error { return nil }, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	if c.Protocol == "grpc" {
		var opts []otlptracegrpc.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracegrpc.WithEndpointURL(c.Endpoint))
		}
		exp, err = otlptracegrpc.New(ctx, opts...)
	} else {
		var opts []otlptracehttp.Option
		if c.Endpoint != "" {
			opts = append(opts, otlptracehttp.WithEndpointURL(strings.TrimSuffix(c.Endpoint, "/")+"/v1/traces"))
		}
		exp, err = otlptracehttp.New(ctx, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("observability.traces: %w", err)
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(c.ServiceName), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, nil, err
	}
	tp := newTracerProvider(c, sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	return tp, tp.Shutdown, nil
}

// newTracerProvider builds the SDK provider with sluice's link limit and
// sampler. A validated c is assumed. It reads the process environment, as
// the SDK does.
func newTracerProvider(c TracesConfig, opts ...sdktrace.TracerProviderOption) *sdktrace.TracerProvider {
	// A flush span links to every sampled consume span whose rows its
	// insert carries, and a consume span to every sampled producer: up to
	// 1024 unless OTEL_SPAN_LINK_COUNT_LIMIT says otherwise (the SDK's own
	// default is 128).
	limits := sdktrace.NewSpanLimits()
	if os.Getenv("OTEL_SPAN_LINK_COUNT_LIMIT") == "" {
		limits.LinkCountLimit = FlushLinkLimit
	}
	opts = append(opts, sdktrace.WithSpanLimits(limits))
	// With OTEL_TRACES_SAMPLER set, the SDK builds the sampler from the
	// environment itself; the config's ratio is the fallback.
	if strings.TrimSpace(os.Getenv("OTEL_TRACES_SAMPLER")) == "" {
		opts = append(opts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(*c.SampleRatio))))
	}
	return sdktrace.NewTracerProvider(opts...)
}
