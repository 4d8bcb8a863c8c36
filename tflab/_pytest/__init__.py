"""The pytest plugin's parts (`tflab.pytest_plugin` is the entry point): what one test records, the
summary text, and the JSON file and baseline."""
