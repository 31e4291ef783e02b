"""The engine's gRPC server (`switchyard engine`): the verbs over proto/, the step loop, health."""
