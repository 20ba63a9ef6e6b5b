package main

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/sluicehq/sluice/internal/wasmbuild"
)

// schemaRegistry is the smallest Confluent schema registry the Kafka
// engine's AvroConfluent needs: GET /schemas/ids/1 answers
// {"schema": "<sensor_batch.avsc as a JSON string>"}, on loopback.
type schemaRegistry struct {
	URL    string
	srv    *http.Server
	served chan struct{} // closed when Serve has returned
}

// avscPath is the workload's schema, a verbatim copy of the published one.
const avscPath = "benchmarks/sensor/testdata/sensor_batch.avsc"

func startSchemaRegistry() (*schemaRegistry, error) {
	avsc, err := os.ReadFile(filepath.Join(wasmbuild.RepoRoot(), avscPath))
	if err != nil {
		return nil, err
	}
	if !json.Valid(avsc) {
		return nil, errors.New(avscPath + " is not JSON")
	}
	body, err := json.Marshal(map[string]string{"schema": string(avsc)})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /schemas/ids/1", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		_, _ = w.Write(body)
	})
	r := &schemaRegistry{URL: "http://" + ln.Addr().String(), served: make(chan struct{}),
		srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}}
	go func() {
		defer close(r.served)
		_ = r.srv.Serve(ln)
	}()
	return r, nil
}

func (r *schemaRegistry) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = r.srv.Shutdown(ctx)
	<-r.served
}
