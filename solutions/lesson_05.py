"""Lesson 5: From records to a RuntimeGraph. Reference solutions."""


def successors(records) -> dict:
    """{operator name: [names of its successors]} for the records `kuiper.pnnx.parse_param` returns: the
    operators that consume any of its outputs, each listed once, in order of first use (for each output
    operand in turn, its consumers in order). See course_notes/05-runtime-graph.md, "The runtime records"."""
    result = {}
    for op in records.operators:
        found = []
        for name in op.outputs:
            for consumer in records.operands[name].consumers:
                if consumer not in found:
                    found.append(consumer)
        result[op.name] = found
    return result


def shared_operands(records) -> list:
    """The names of the operands read in more than one input slot (by two operators, or twice by one), in
    the order of records.operands. See course_notes/05-runtime-graph.md, exercise 1."""
    slots = {name: 0 for name in records.operands}
    for op in records.operators:
        for name in op.inputs:
            slots[name] += 1
    return [name for name, count in slots.items() if count > 1]
