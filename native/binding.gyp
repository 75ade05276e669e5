{
  "targets": [
    {
      "target_name": "mage_blas",
      "sources": ["mage_blas.c"],
      "cflags": ["-O2", "-Wall"],
      "libraries": ["-lopenblas"]
    }
  ]
}
