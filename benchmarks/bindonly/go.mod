module tidemark.invalid/benchmarks/bindonly

go 1.19
