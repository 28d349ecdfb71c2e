"""Generated protobuf and gRPC code (private: the wire types, not an API)."""
