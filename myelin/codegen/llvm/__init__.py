"""The CPU back end: LLVM IR emitted with llvmlite and compiled for the host (or another) CPU."""
