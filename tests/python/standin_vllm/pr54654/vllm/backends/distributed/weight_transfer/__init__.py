"""Stand-in of vllm.backends.distributed.weight_transfer, the layout of the
reorganisation vllm-project/vllm#54654 (055e47c, a8f1d79), closed without
merging: an installation built from that branch has the engines only
here."""
