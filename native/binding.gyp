{
  "targets": [
    {
      "target_name": "mage_blas",
      "sources": ["mage_blas.c", "mage_ops.c"],
      "cflags": ["-O3", "-Wall", "-fopenmp-simd", "-ffp-contract=off", "-fno-trapping-math", "-fno-math-errno"],
      "libraries": ["-lopenblas"]
    }
  ]
}
