"""Facts that change: which older unit a new one replaces (`supersession`, with the
attribute `slots`), what is true now ranked first (`current_first`), and `Memory.update`'s
revisions of a turn (`revisions`)."""
