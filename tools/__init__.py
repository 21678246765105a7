"""Developer tools: the offline plan (`plan`, `render`, `mocks`), the config schema writer and benchmarks."""
