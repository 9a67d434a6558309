"""Generated gRPC and protobuf code for gpufair's APIs (see protos/)."""
