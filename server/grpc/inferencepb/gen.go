// Package inferencepb is the Go code generated from inference.proto: KServe's Open Inference
// Protocol (v2) over gRPC, as Triton names it (package inference), the part ortserve serves.
package inferencepb

// Regenerating needs protoc (python3 with grpcio-tools gives it as grpc_tools.protoc) and,
// on PATH, protoc-gen-go (google.golang.org/protobuf/cmd/protoc-gen-go at go.mod's version
// of google.golang.org/protobuf) and protoc-gen-go-grpc (google.golang.org/grpc/cmd/protoc-gen-go-grpc).
//go:generate python3 -m grpc_tools.protoc -I. --go_out=paths=source_relative:. --go-grpc_out=paths=source_relative:. inference.proto
