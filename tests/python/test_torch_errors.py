"""Every error flexplan.torch and flexplan.executor add is raised as a
FlexplanError with its status and a message naming the problem
(torch_errors.py, one rank)."""
from torch_mpi import run_mpi

CHECKS = ["module_param_not_in_plan", "plan_param_not_in_module", "requires_grad_differs", "mxfp8_param",
          "meta_module_init",
          "forward_out_of_plan_order", "forward_before_optimizer_step", "optimizer_step_before_backward_done",
          "already_sharded", "not_sharded", "unknown_backend", "bad_nccl_id", "bad_plan_path", "unknown_param",
          "unknown_module", "param_read_between_steps", "backward_of_eval_forward", "training_forward_in_unshard",
          "unshard_in_unshard", "unshard_inside_step", "param_read_after_close",
          # argument errors of Sharded's methods and the checkpoint functions (issue 29, item 7)
          "clip_max_norm_type", "clip_max_norm_value", "clip_norm_type_value", "step_opt_type",
          "optimizer_cls_type", "optimizer_cls_makes", "state_dict_optimizer_type", "state_dict_copy_type",
          "load_state_dict_sd_type", "load_in_place_id_type",
          # lifetimes, closed objects, optimizers of the wrong params (issue 40)
          "executor_param_after_destroy", "executor_hook_after_destroy", "view_tensor_after_destroy",
          "view_buffer_after_destroy", "handed_tensor_emptied", "handed_memoryview_released", "opt_step_after_close",
          "clip_after_close", "clip_of_module_after_close", "save_after_close", "full_state_dict_after_close",
          "state_dict_after_close", "main_params_emptied", "shard_after_close", "optimizer_of_another_state",
          "torch_optimizer_over_module_params",
          # FSDP2 habits (issue 40)
          "torch_clip_grad_norm_after_backward", "clip_then_train_on", "requires_grad_after_shard",
          "module_requires_grad_after_shard", "requires_grad_attr_after_shard", "requires_grad_inside_step",
          "torch_save_state_dict", "torch_save_state_dict_no_file", "pickle_param", "state_dict_in_unshard",
          "ga2_grads_rebound",
          # a step abandoned between forward and backward (issue 40)
          "abandoned_forward_named_ga1", "abandoned_eval_named_ga1", "abandoned_step_recovers_ga1",
          "abandoned_forward_named_ga2", "abandoned_eval_named_ga2", "abandoned_step_recovers_ga2",
          # loads refuse extra keys and dtype changes (issue 40)
          "load_in_place_extra_key", "load_in_place_dtype", "sharded_load_extra_key"]


def test_errors():
    rc, out = run_mpi(1, "torch_errors.py", timeout=180)
    print(out[-6000:])
    for c in CHECKS:
        assert f"OK {c}:" in out, f"{c}:\n{out[-6000:]}"
    assert rc == 0, out[-6000:]
