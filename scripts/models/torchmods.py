"""The torch reference modules of reference.py (golden venv only: the build has no torch; its
graphs come from bertonnx.py and must match these, see reference.GOLDEN_CHECKS)."""
import torch
import transformers
import torch.nn.functional as F
from torch import nn

from common import THREADS

torch.set_num_threads(THREADS)
transformers.logging.set_verbosity_error()  # the unused pooler weights are expected
torch.manual_seed(0)

INPUTS = ["input_ids", "attention_mask", "token_type_ids"]


def load_bert(model_dir):
    """BertModel from the package's safetensors; eager attention exports to plain ONNX ops."""
    from transformers import BertModel

    m = BertModel.from_pretrained(str(model_dir), attn_implementation="eager",
                                  add_pooling_layer=False, local_files_only=True)
    return m.eval()


class Encoder(nn.Module):
    """MiniLM encoder: (input_ids, attention_mask, token_type_ids) -> last_hidden_state."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, input_ids, attention_mask, token_type_ids):
        return self.bert(input_ids=input_ids, attention_mask=attention_mask,
                         token_type_ids=token_type_ids).last_hidden_state


class Sentiment(nn.Module):
    """Frozen MiniLM + mean pooling over the attention mask + L2 normalize + linear head."""

    def __init__(self, bert, weight, bias):
        super().__init__()
        self.bert = bert
        self.head = nn.Linear(weight.shape[1], weight.shape[0])
        with torch.no_grad():
            self.head.weight.copy_(torch.as_tensor(weight, dtype=torch.float32))
            self.head.bias.copy_(torch.as_tensor(bias, dtype=torch.float32))

    def forward(self, input_ids, attention_mask, token_type_ids):
        h = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                      token_type_ids=token_type_ids).last_hidden_state
        m = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)
        pooled = F.normalize(pooled, p=2.0, dim=1, eps=1e-12)
        return self.head(pooled)


def torch_feeds(feeds):
    return tuple(torch.from_numpy(feeds[k]) for k in INPUTS)
