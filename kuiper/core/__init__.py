"""The core every other part builds on: tensors, errors, the graph's operator records, kernel variants, and
the math and files the backends share."""
