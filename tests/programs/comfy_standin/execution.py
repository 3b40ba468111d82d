"""ComfyUI's executor shapes (execution.py 0.3.x): ``PromptExecutor.execute`` runs a prompt; every node runs through
``async def execute(server, dynprompt, caches, current_item, ...)``; a node whose inputs did not change is cached:
not executed at all, or returned at once when it is an output node."""
import asyncio

import nodes


class DynamicPrompt:
    def __init__(self, original_prompt):
        self.original_prompt = original_prompt
        self.ephemeral_prompt = {}

    def get_node(self, node_id):
        if node_id in self.ephemeral_prompt:
            return self.ephemeral_prompt[node_id]
        return self.original_prompt[node_id]


class Outputs:
    def __init__(self):
        self.values = {}
        self.keys = {}

    def get(self, node_id):
        return self.values.get(node_id)


class Caches:
    def __init__(self):
        self.outputs = Outputs()


def _key(prompt, node_id):
    node = prompt[node_id]
    return (node["class_type"], tuple(sorted((k, _key(prompt, v[0]) if isinstance(v, list) else v)
                                             for k, v in node["inputs"].items())))


async def execute(server, dynprompt, caches, current_item, extra_data, executed, prompt_id, execution_list,
                  pending_subgraph_results, pending_async_nodes):
    unique_id = current_item
    class_type = dynprompt.get_node(unique_id)["class_type"]
    if caches.outputs.get(unique_id) is not None:
        return ("SUCCESS", None, None)
    node = dynprompt.get_node(unique_id)
    args = {k: (caches.outputs.get(v[0])[v[1]] if isinstance(v, list) else v) for k, v in node["inputs"].items()}
    obj = nodes.NODE_CLASS_MAPPINGS[class_type]()
    out = getattr(obj, nodes.FUNCTIONS[class_type])(**args)
    caches.outputs.values[unique_id] = out if isinstance(out, tuple) else (out,)
    caches.outputs.keys[unique_id] = _key(dynprompt.original_prompt, unique_id)
    executed.add(unique_id)
    await asyncio.sleep(0)
    return ("SUCCESS", None, None)


class PromptExecutor:
    def __init__(self, server=None):
        self.server = server
        self.caches = Caches()

    def execute(self, prompt, prompt_id, extra_data={}, execute_outputs=[]):
        asyncio.run(self.execute_async(prompt, prompt_id, extra_data, execute_outputs))

    async def execute_async(self, prompt, prompt_id, extra_data={}, execute_outputs=[]):
        dynprompt = DynamicPrompt(prompt)
        for nid in prompt:  # a node whose inputs changed is run again
            if self.caches.outputs.keys.get(nid) != _key(prompt, nid):
                self.caches.outputs.values.pop(nid, None)
        for nid in list(self.caches.outputs.values):
            for other in prompt:
                pass
        executed = set()
        order = []

        def visit(nid):
            if nid in order:
                return
            for v in prompt[nid]["inputs"].values():
                if isinstance(v, list):
                    visit(v[0])
            order.append(nid)
        for nid in execute_outputs:
            visit(nid)
        for nid in order:  # nodes cached upstream are not executed; an output node is, and returns at once
            if self.caches.outputs.get(nid) is not None and nid not in execute_outputs:
                continue
            await execute(self.server, dynprompt, self.caches, nid, extra_data, executed, prompt_id, None, {}, {})
