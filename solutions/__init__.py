"""Reference solutions of the course's exercises, one module per lesson with the names of exercises/.

CI runs every checkpoint against them (`kuiper lesson N --solutions`), which is how the checkpoints are
known to pass on correct code. Write your own in exercises/ before you read these.
"""
