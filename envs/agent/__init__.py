"""swebox.envs.agent: the agent's interface to an episode, one turn at a time.

actions.py parses a model reply into an action in one of three styles (``bash_block``, ``xml_function``,
``json_tool_call``); formats.py holds the tools' schemas and the help shown on a format error; prompts.py writes
the system and task prompts; tools.py runs an action in the sandbox (bash, ``str_replace_editor``, submit);
editor.py is that editor; observations.py renders what a command did into the next observation.
"""
