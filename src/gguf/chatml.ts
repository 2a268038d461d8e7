// The ChatML template as Jinja, in the common form (OpenHermes, Qwen without tools), so that
// node-llama-cpp recognises it as ChatML. Replies end with <|im_end|>.
export const CHATML_TEMPLATE =
  "{% for message in messages %}" +
  "{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}" +
  "{% endfor %}" +
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
