"""Fast CPU code for the numpy backend: kuiper's worker threads (threads.py) and the fast versions of layers."""
