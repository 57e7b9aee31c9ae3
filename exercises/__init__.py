"""Your code for the course: one module per lesson, exercises/lesson_NN.py.

Each module holds what its lesson asks you to write, as functions and classes whose docstrings say what to
compute and which part of course_notes/ explains it; as shipped, each raises NotImplementedError. Write them,
then run `kuiper lesson N`: its checkpoint, tests/lessons/checkpoint_NN_*.py, calls them and compares the
results with kuiper's own implementation, with numpy, or with the outputs PyTorch saved in models/.
`kuiper lessons` shows how far every lesson is.
"""
