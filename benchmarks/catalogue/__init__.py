"""The benchmarks' catalogues, as data apart from the scripts that run them: the third-party
layers (third_party_layers.py, built by third_party_adapters.py, with their expected findings in
third_party_findings.py) and the mutation benchmark's third-party backward passes (mutants.py)."""
