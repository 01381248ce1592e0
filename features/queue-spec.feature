@AtLeastOnceQueue-0.2.0 @spec-validation
Feature: AtLeastOnceQueue 0.2.0 spec validation
  The spec of a queue is closed, its integers are never converted from
  strings or fractions, and both fields have inclusive ranges.

  @Q-INPUT-1 @Q-INPUT-3 @Q-INPUT-4 @Q-OPS-1
  Scenario Outline: a queue spec at the edge of a range is accepted
    When I create a queue "q" with spec <spec>
    Then the request is accepted

    Examples:
      | spec                                                          |
      | {"messageRetentionSeconds": 60}                               |
      | {"messageRetentionSeconds": 1209600}                          |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 0}     |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 43200} |

  @Q-INPUT-1 @Q-INPUT-2 @Q-INPUT-3 @Q-INPUT-4 @Q-OPS-2
  Scenario Outline: an out-of-range, missing or converted integer is invalid_spec
    When I create a queue "q" with spec <spec>
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "<pointer>"
    And the listing holds exactly 0 resources named "q"

    Examples:
      | spec                                                          | pointer                        |
      | {"messageRetentionSeconds": 59}                               | /spec/messageRetentionSeconds  |
      | {"messageRetentionSeconds": 1209601}                          | /spec/messageRetentionSeconds  |
      | {}                                                            | /spec                          |
      | {"messageRetentionSeconds": "60"}                             | /spec/messageRetentionSeconds  |
      | {"messageRetentionSeconds": 60.5}                             | /spec/messageRetentionSeconds  |
      | {"messageRetentionSeconds": 60.0}                             | /spec/messageRetentionSeconds  |
      | {"messageRetentionSeconds": 6e1}                              | /spec/messageRetentionSeconds  |
      | {"messageRetentionSeconds": null}                             | /spec/messageRetentionSeconds  |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": -1}    | /spec/deliveryDelaySeconds     |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 43201} | /spec/deliveryDelaySeconds     |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": "5"}   | /spec/deliveryDelaySeconds     |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 5.5}   | /spec/deliveryDelaySeconds     |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 5.0}   | /spec/deliveryDelaySeconds     |
      | {"messageRetentionSeconds": 60, "deliveryDelaySeconds": true}  | /spec/deliveryDelaySeconds     |

  @Q-INPUT-7 @Q-UNK-1 @Q-UNK-2
  Scenario: an unknown spec field is refused, not ignored or stored
    When I create a queue "q" with spec {"messageRetentionSeconds": 60, "maxMessages": 10}
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "/spec"
    And the listing holds exactly 0 resources named "q"

  @Q-INPUT-7 @Q-UNK-2 @Q-OPS-8
  Scenario: an update with an unknown spec field is refused and changes nothing
    Given a queue "q" with spec {"messageRetentionSeconds": 60}
    When I replace the spec of "q" with:
      """
      {"messageRetentionSeconds": 120, "fifo": true}
      """
    Then the request is refused with 422 "invalid_spec"
    And the spec of "q" reads {"messageRetentionSeconds": 60}

  @Q-INPUT-5 @Q-INPUT-6
  Scenario: non-empty privateInputs are refused
    When I create a queue "q" with privateInputs {"password": "x"}
    Then the request is refused with 422 "invalid_spec"
    And the problem points at "/privateInputs"

  @Q-INPUT-5 @Q-INPUT-6
  Scenario: empty privateInputs are accepted
    When I create a queue "q" with privateInputs {}
    Then the request is accepted

  @Q-OPS-8 @Q-INPUT-3 @Q-INPUT-4
  Scenario: an update replaces the whole spec
    Given a queue "q" with spec {"messageRetentionSeconds": 60, "deliveryDelaySeconds": 5}
    When I replace the spec of "q" with:
      """
      {"messageRetentionSeconds": 120}
      """
    Then the request is accepted
    And the spec of "q" reads {"messageRetentionSeconds": 120}
    And "q" is at generation 2
