package telemetry

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestValidateFromEnvironment(t *testing.T) {
	half := 0.5
	for _, tc := range []struct {
		name     string
		cfg      TracesConfig
		env      map[string]string
		exporter string
		protocol string
		ratio    float64
		service  string
	}{
		{"nothing set", TracesConfig{}, nil, "none", "http/protobuf", 0.01, "sluice"},
		{"endpoint in env turns otlp on", TracesConfig{}, map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, "otlp", "http/protobuf", 0.01, "sluice"},
		{"traces protocol wins over generic", TracesConfig{}, map[string]string{"OTEL_TRACES_EXPORTER": "otlp",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"}, "otlp", "grpc", 0.01, "sluice"},
		{"env sampler and service", TracesConfig{}, map[string]string{"OTEL_TRACES_SAMPLER_ARG": "0.25", "OTEL_SERVICE_NAME": "ingest"}, "none", "http/protobuf", 0.25, "ingest"},
		{"config wins over env", TracesConfig{Exporter: "otlp", Protocol: "grpc", SampleRatio: &half, ServiceName: "cfg"},
			map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_TRACES_SAMPLER_ARG": "0.1", "OTEL_SERVICE_NAME": "env"},
			"otlp", "grpc", 0.5, "cfg"},
	} {
		c := tc.cfg
		if err := c.Validate(envOf(tc.env)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if c.Exporter != tc.exporter || c.Protocol != tc.protocol || *c.SampleRatio != tc.ratio || c.ServiceName != tc.service {
			t.Errorf("%s: got %s %s %v %s, want %s %s %v %s", tc.name, c.Exporter, c.Protocol, *c.SampleRatio, c.ServiceName,
				tc.exporter, tc.protocol, tc.ratio, tc.service)
		}
	}
	two := 2.0
	for _, tc := range []struct {
		cfg  TracesConfig
		env  map[string]string
		want string
	}{
		{TracesConfig{Exporter: "jaeger"}, nil, "observability.traces.exporter"},
		{TracesConfig{Protocol: "http/json"}, nil, "observability.traces.protocol"},
		{TracesConfig{SampleRatio: &two}, nil, "observability.traces.sample_ratio"},
		{TracesConfig{}, map[string]string{"OTEL_TRACES_SAMPLER_ARG": "most"}, "OTEL_TRACES_SAMPLER_ARG"},
	} {
		c := tc.cfg
		if err := c.Validate(envOf(tc.env)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v with %v: error %v, want it to name %s", tc.cfg, tc.env, err, tc.want)
		}
	}
}

// traceReceiver is an OTLP/gRPC trace service that keeps what it gets.
type traceReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   map[string]int // links by span name
	service string
}

func (r *traceReceiver) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.ResourceSpans {
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.Key == "service.name" {
				r.service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans[s.Name] = len(s.Links)
			}
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// TestSetupGRPC exports through the real OTLP/gRPC exporter to an in-test
// receiver, and checks that a span keeps more links than the SDK's default
// limit of 128 (flush spans link to up to FlushLinkLimit consume spans).
func TestSetupGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	recv := &traceReceiver{spans: map[string]int{}}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, recv)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	ratio := 1.0
	tp, shutdown, err := Setup(context.Background(), TracesConfig{Exporter: "otlp", Protocol: "grpc",
		Endpoint: "http://" + ln.Addr().String(), SampleRatio: &ratio, ServiceName: "sluice-grpc-test"}, "test")
	if err != nil {
		t.Fatal(err)
	}
	tr := tp.Tracer("test")
	var links []trace.Link
	for i := range 300 {
		var tid trace.TraceID
		var sid trace.SpanID
		tid[0], tid[15] = 1, byte(i)
		sid[0], sid[7] = 1, byte(i>>8)
		sid[6] = byte(i)
		links = append(links, trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid})})
	}
	_, span := tr.Start(context.Background(), "flush", trace.WithLinks(links...))
	span.End()
	if err := shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if recv.service != "sluice-grpc-test" {
		t.Errorf("service.name = %q", recv.service)
	}
	if n, ok := recv.spans["flush"]; !ok || n != 300 {
		t.Errorf("flush span received %v with %d links, want 300 links", ok, n)
	}
}

// TestSamplerFromEnvironment builds the provider as Setup does and checks
// which spans each OTEL_TRACES_SAMPLER samples: a set variable wins over the
// config's ratio, and the SDK's meaning of each value holds.
func TestSamplerFromEnvironment(t *testing.T) {
	remote := func(sampled bool) context.Context {
		cfg := trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5}, Remote: true}
		if sampled {
			cfg.TraceFlags = trace.FlagsSampled
		}
		return trace.ContextWithRemoteSpanContext(context.Background(), trace.NewSpanContext(cfg))
	}
	type want struct{ root, sampledParent, unsampledParent bool }
	for _, tc := range []struct {
		sampler, arg string
		ratio        float64
		want         want
	}{
		{"", "", 1, want{true, true, false}},
		{"", "", 0, want{false, true, false}},
		{"always_on", "", 0, want{true, true, true}},
		{"always_off", "", 1, want{false, false, false}},
		{"traceidratio", "0", 1, want{false, false, false}},
		{"traceidratio", "", 0, want{true, true, true}}, // the SDK's default argument is 1
		{"parentbased_always_on", "", 0, want{true, true, false}},
		{"parentbased_always_off", "", 1, want{false, true, false}},
		{"parentbased_traceidratio", "0", 1, want{false, true, false}},
		{"parentbased_traceidratio", "1", 0, want{true, true, false}},
	} {
		t.Run(tc.sampler+"="+tc.arg, func(t *testing.T) {
			t.Setenv("OTEL_TRACES_SAMPLER", tc.sampler)
			t.Setenv("OTEL_TRACES_SAMPLER_ARG", tc.arg)
			ratio := tc.ratio
			c := TracesConfig{SampleRatio: &ratio}
			if err := c.Validate(func(k string) string {
				return map[string]string{"OTEL_TRACES_SAMPLER": tc.sampler, "OTEL_TRACES_SAMPLER_ARG": tc.arg}[k]
			}); err != nil {
				t.Fatal(err)
			}
			tp := newTracerProvider(c)
			defer func() { _ = tp.Shutdown(context.Background()) }()
			tr := tp.Tracer("test")
			sampled := func(ctx context.Context) bool {
				_, s := tr.Start(ctx, "span")
				defer s.End()
				return s.SpanContext().IsSampled()
			}
			got := want{sampled(context.Background()), sampled(remote(true)), sampled(remote(false))}
			if got != tc.want {
				t.Errorf("root, sampled parent, unsampled parent sampled: %+v, want %+v", got, tc.want)
			}
		})
	}
	for _, env := range []map[string]string{
		{"OTEL_TRACES_SAMPLER": "jaeger_remote"},
		{"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"},
		{"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "half"},
	} {
		var c TracesConfig
		err := c.Validate(envOf(env))
		if err == nil || !strings.Contains(err.Error(), "OTEL_TRACES_SAMPLER") {
			t.Errorf("%v: error %v, want it to name the variable", env, err)
		}
	}
}
