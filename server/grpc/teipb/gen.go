// Package teipb is the Go code generated from tei.proto: text-embeddings-inference's gRPC
// API (package tei.v1), which ortserve serves beside KServe's on --grpc-addr.
package teipb

// Regenerating needs protoc (python3 with grpcio-tools gives it as grpc_tools.protoc) and,
// on PATH, protoc-gen-go (google.golang.org/protobuf/cmd/protoc-gen-go at go.mod's version
// of google.golang.org/protobuf) and protoc-gen-go-grpc (google.golang.org/grpc/cmd/protoc-gen-go-grpc).
//go:generate python3 -m grpc_tools.protoc -I. --go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. tei.proto
