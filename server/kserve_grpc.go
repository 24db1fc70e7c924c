package server

// KServe's Open Inference Protocol (v2) over gRPC, as Triton's package inference defines it
// and tritonclient.grpc speaks it: the same models, tensors, parameters and errors as the REST
// routes (kserve.go), which do the work. tritonclient.grpc sends a BYTES input's data in
// raw_input_contents (per element, a 4-byte little-endian length and its bytes) and reads
// outputs from raw_output_contents; both are served, and an input's contents.bytes_contents
// too.

import (
	"context"
	"fmt"
	"unicode/utf8"

	pb "github.com/ortserve/ortserve/server/grpc/inferencepb"
)

// kserveGRPC serves GRPCInferenceService. Its methods return errors from below or
// requestErrors: grpcUnary maps them to gRPC's codes.
type kserveGRPC struct {
	pb.UnimplementedGRPCInferenceServiceServer
	s *Server
}

func (k kserveGRPC) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

func (k kserveGRPC) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: k.s.ready.Load()}, nil
}

func (k kserveGRPC) ServerMetadata(context.Context, *pb.ServerMetadataRequest) (*pb.ServerMetadataResponse, error) {
	return &pb.ServerMetadataResponse{Name: "ortserve", Version: k.s.cfg.Info.Version, Extensions: []string{"model_configuration"}}, nil
}

// model is kserveModelOf for a request that names a version, or none ("": the default).
func (k kserveGRPC) model(name, version string) (ModelInfo, error) {
	return k.s.kserveModelOf(name, version, version != "")
}

func (k kserveGRPC) ModelReady(_ context.Context, req *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	if _, err := k.model(req.GetName(), req.GetVersion()); err != nil {
		return nil, err
	}
	return &pb.ModelReadyResponse{Ready: k.s.ready.Load()}, nil
}

func (k kserveGRPC) ModelMetadata(_ context.Context, req *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	mi, err := k.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	md := KServeMetadata(mi)
	tensors := func(ts []TensorMetadata) []*pb.ModelMetadataResponse_TensorMetadata {
		out := make([]*pb.ModelMetadataResponse_TensorMetadata, len(ts))
		for i, t := range ts {
			out[i] = &pb.ModelMetadataResponse_TensorMetadata{Name: t.Name, Datatype: t.Datatype, Shape: t.Shape}
		}
		return out
	}
	return &pb.ModelMetadataResponse{Name: md.Name, Versions: md.Versions, Platform: md.Platform, Inputs: tensors(md.Inputs), Outputs: tensors(md.Outputs)}, nil
}

func (k kserveGRPC) ModelConfig(_ context.Context, req *pb.ModelConfigRequest) (*pb.ModelConfigResponse, error) {
	mi, err := k.model(req.GetName(), req.GetVersion())
	if err != nil {
		return nil, err
	}
	c := TritonConfig(mi, k.s.cfg.MaxInputs)
	out := &pb.ModelConfig{Name: c.Name, Platform: c.Platform, Backend: c.Backend, MaxBatchSize: int32(min(c.MaxBatchSize, 1<<31-1))}
	for _, t := range c.Input {
		out.Input = append(out.Input, &pb.ModelInput{Name: t.Name, DataType: pb.DataType(pb.DataType_value[t.DataType]), Dims: t.Dims})
	}
	for _, t := range c.Output {
		out.Output = append(out.Output, &pb.ModelOutput{Name: t.Name, DataType: pb.DataType(pb.DataType_value[t.DataType]), Dims: t.Dims})
	}
	return &pb.ModelConfigResponse{Config: out}, nil
}

func (k kserveGRPC) ModelInfer(ctx context.Context, m *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	mi, err := k.model(m.GetModelName(), m.GetModelVersion())
	if err != nil {
		return nil, err
	}
	req, err := inferRequestOf(m)
	if err != nil {
		return nil, err
	}
	resp, _, err := k.s.kserveRun(ctx, mi, m.GetModelVersion(), req)
	if err != nil {
		return nil, err
	}
	out := &pb.ModelInferResponse{ModelName: resp.ModelName, ModelVersion: resp.ModelVersion, Id: resp.ID}
	for _, o := range resp.Outputs {
		var raw []byte
		switch d := o.Data.(type) {
		case []float32:
			if raw, err = appendFP32Tensor(nil, d); err != nil {
				return nil, fmt.Errorf("encoding output %q: %w", o.Name, err)
			}
		case []string:
			raw = appendBytesTensor(nil, d)
		}
		out.Outputs = append(out.Outputs, &pb.ModelInferResponse_InferOutputTensor{Name: o.Name, Datatype: o.Datatype, Shape: o.Shape})
		out.RawOutputContents = append(out.RawOutputContents, raw)
	}
	return out, nil
}

// inferRequestOf is a gRPC infer request as the REST one that kserveRun checks and serves:
// parameters as JSON would carry them, and each input's data as binary tensor data, from
// raw_input_contents (one entry per input, in order) or from its contents' bytes_contents.
// An input with neither has no elements, which its shape then contradicts.
func inferRequestOf(m *pb.ModelInferRequest) (*InferRequest, error) {
	raw := m.GetRawInputContents()
	if len(raw) > 0 && len(raw) != len(m.GetInputs()) {
		return nil, invalid("raw_input_contents has %d entries for %d inputs: give every input's bytes, in the inputs' order", len(raw), len(m.GetInputs()))
	}
	req := &InferRequest{ID: m.GetId(), Parameters: parametersOf(m.GetParameters())}
	for i, in := range m.GetInputs() {
		ii := InferInput{Name: in.GetName(), Shape: in.GetShape(), Datatype: in.GetDatatype(), Parameters: parametersOf(in.GetParameters()), hasBinary: true}
		switch {
		case len(raw) > 0 && in.GetContents() != nil:
			return nil, invalid("input %q has both contents and raw_input_contents: send its data one way", in.GetName())
		case len(raw) > 0:
			ii.binary = raw[i]
		default:
			for _, b := range in.GetContents().GetBytesContents() {
				if !utf8.Valid(b) {
					return nil, invalid("input %q: an element of bytes_contents is not valid UTF-8: send text as UTF-8", in.GetName())
				}
				ii.binary = appendBytesTensor(ii.binary, []string{string(b)})
			}
		}
		req.Inputs = append(req.Inputs, ii)
	}
	for _, o := range m.GetOutputs() {
		req.Outputs = append(req.Outputs, RequestedOutput{Name: o.GetName(), Parameters: parametersOf(o.GetParameters())})
	}
	return req, nil
}

// parametersOf is a gRPC parameter map as JSON's would decode: bools, strings, and numbers
// as float64.
func parametersOf(ps map[string]*pb.InferParameter) map[string]any {
	if len(ps) == 0 {
		return nil
	}
	out := make(map[string]any, len(ps))
	for name, p := range ps {
		switch v := p.GetParameterChoice().(type) {
		case *pb.InferParameter_BoolParam:
			out[name] = v.BoolParam
		case *pb.InferParameter_StringParam:
			out[name] = v.StringParam
		case *pb.InferParameter_Int64Param:
			out[name] = float64(v.Int64Param)
		case *pb.InferParameter_DoubleParam:
			out[name] = v.DoubleParam
		case *pb.InferParameter_Uint64Param:
			out[name] = float64(v.Uint64Param)
		}
	}
	return out
}
