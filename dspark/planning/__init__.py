"""Planning: the model inputs, capacity per engine, findings and verdict, validate, start, the serve config."""
