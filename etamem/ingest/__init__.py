"""What comes in: validated turns (`inputs`), chat messages as turns (`messages`), timestamps
(`timeparse`) and readers of dataset files (`datasets`)."""
