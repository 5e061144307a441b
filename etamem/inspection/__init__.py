"""Looking inside a space: the data of trees, statistics and traces (`reports`), their terminal
rendering (`render`) and the HTML page and plots (`viz`)."""
