"""What the ``agentpool`` command shows a person: run progress, results and the demo."""
