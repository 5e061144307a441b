"""Adapters that put ETAMem behind agent frameworks' memory interfaces, each an optional extra
imported lazily (a missing framework raises ImportError naming the extra to install; see
docs/integrations/):

- `etamem.integrations.langgraph.EtamemStore`: a LangGraph `BaseStore` (`pip install -e ".[langgraph]"`);
- `etamem.integrations.openai_agents.EtamemSession`: an OpenAI Agents SDK session
  (`pip install -e ".[openai-agents]"`);
- `etamem.integrations.llamaindex.EtamemMemoryBlock`: a LlamaIndex memory block
  (`pip install -e ".[llamaindex]"`).
"""
