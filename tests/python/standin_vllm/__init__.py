"""Stand-ins of vLLM for refit's tests: current/ and pinned/ each hold a
`vllm` package of one generation; session.py is what both share."""
